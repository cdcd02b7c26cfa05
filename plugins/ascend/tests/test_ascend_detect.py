"""Detection through the real path: host -> vendor thread -> ctypes -> the fake libdcmi.so."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
from ascend_fakes import chip_line, native

from xpushare.errors import PluginError, VendorUnavailable
from xpushare.native import MissingSymbol
from xpushare_ascend import library


def test_detect_reports_every_npu_with_its_facts(make_handle, fake_lib, table, tmp_path):
    numa = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:42:00.0"
    numa.mkdir(parents=True)
    (numa / "numa_node").write_text("1\n")
    table.chips(
        chip_line(0),
        chip_line(1),
        # The card's MCU is a unit of card 1 too, but no accelerator.
        chip_line(9, card=1, device=1, logic=99, phy=99, type=1, name="MCU"),
    )
    handle = make_handle(fake_lib)
    handle.startup()
    devices = handle.detect()

    assert [d.index for d in devices] == [0, 1]
    first, second = devices
    assert first.id == "NPU-00010000-00000002-00000003-00000004-00000005"
    assert first.vendor == "ascend"
    assert first.model == "Ascend910B3"
    assert first.memory_mib == 65536
    assert first.compute_units == 20
    assert first.pci_bus_id == "0000:41:00.0"
    assert first.numa_node is None
    assert second.numa_node == 1
    assert first.healthy
    assert first.extra["phy_id"] == "0" and second.extra["phy_id"] == "1"
    assert first.extra["dcmi_api"] == "v1"
    assert first.extra["memory_kind"] == "hbm"
    # HAMi's 910B3 templates: 5 and 10 of 20 AI cores.
    assert [(p.name, p.memory_mib, p.compute_percent, p.max_count) for p in first.partitions] == [
        ("vir05_1c_16g", 16384, 25, 4),
        ("vir10_3c_32g", 32768, 50, 2),
    ]
    assert first.share_slots == 4
    assert first.extra["template_ai_cores"] == "vir05_1c_16g=5,vir10_3c_32g=10"


def test_310p_has_ddr_memory_and_its_own_templates(make_handle, fake_lib, table):
    table.chips(chip_line(0, name="310P3", aicore=8, hbm=0, ddr=24576, ddr_util=50))
    handle = make_handle(fake_lib)
    handle.startup()
    (device,) = handle.detect()
    assert device.model == "Ascend310P"
    assert device.memory_mib == 24576
    assert device.extra["memory_kind"] == "ddr"
    assert [(p.name, p.max_count) for p in device.partitions] == [
        ("vir01", 8),
        ("vir02", 4),
        ("vir04", 2),
    ]
    snapshot = handle.monitor([device])
    assert snapshot is not None
    assert snapshot.devices[0].memory_used_mib == 12288


def test_unknown_chip_is_reported_without_templates(make_handle, fake_lib, table):
    table.chips(chip_line(0, name="999X"))
    handle = make_handle(fake_lib)
    handle.startup()
    (device,) = handle.detect()
    assert device.model == "Ascend999X"
    assert device.partitions == ()
    assert device.share_slots == 1
    assert device.mode == "exclusive"


def test_no_chips_is_an_empty_inventory(make_handle, fake_lib, table):
    table.chips()
    handle = make_handle(fake_lib)
    handle.startup()
    assert handle.detect() == ()


def test_a_chip_whose_die_id_is_unreadable_is_left_out(make_handle, fake_lib, table):
    table.chips(chip_line(0), chip_line(1), extra=())
    table.write(chip_line(0), chip_line(1, die="0,0,0,0,0"))
    handle = make_handle(fake_lib)
    handle.startup()
    assert [d.index for d in handle.detect()] == [0]


def test_a_failing_call_is_an_error_not_an_empty_list(make_handle, fake_lib, table):
    table.chips(chip_line(0), extra=("fail dcmi_get_device_chip_info -8005",))
    handle = make_handle(fake_lib)
    handle.startup()
    with pytest.raises(PluginError) as info:
        handle.detect()
    message = str(info.value)
    assert "dcmi_get_device_chip_info" in message
    assert "-8005" in message and "DCMI_ERR_CODE_INNER_ERR" in message
    assert "card 0 device 0" in message


def test_v2_driver_refusing_v1_falls_back_to_the_v2_api(make_handle, fake_lib, table):
    # An A5 driver exports the V1 names but answers NOT_SUPPORT (gpustack-devices.md §1.4).
    table.chips(chip_line(0, logic=4, phy=6, npu="A5-test"), extra=("init -8255",))
    handle = make_handle(fake_lib)
    handle.startup()
    (device,) = handle.detect()
    assert device.extra["dcmi_api"] == "v2"
    assert device.extra["phy_id"] == "6"
    assert device.index == 4
    assert device.extra["npu_name"] == "A5-test"
    # V2 has no card level: the chip is presented as a card of one device.
    assert (device.extra["card"], device.extra["device"]) == ("4", "0")
    # The A5 fake answers the die query for the DDIE only, as A5 drivers do.
    assert device.id.startswith("NPU-00010000-")


def test_a_v2_only_library_is_used_through_the_v2_api(make_handle, fake_builds, table):
    table.chips(chip_line(0))
    handle = make_handle(fake_builds.get("NO_V1"))
    handle.startup()
    assert handle.detect()[0].extra["dcmi_api"] == "v2"


def test_a_library_with_the_2021_card_list_name_still_enumerates(make_handle, fake_builds, table):
    table.chips(chip_line(0), chip_line(1))
    lib = fake_builds.get("NO_V2", "OMIT_dcmi_get_card_list", "LEGACY_CARD_LIST")
    handle = make_handle(lib)
    handle.startup()
    assert len(handle.detect()) == 2


def test_both_generations_refusing_init_makes_the_vendor_inactive(make_handle, fake_lib, table):
    table.chips(chip_line(0), extra=("init -8005", "initv2 -8008"))
    handle = make_handle(fake_lib)
    with pytest.raises(VendorUnavailable) as info:
        handle.startup()
    reason = info.value.reason
    assert "dcmi_init returned -8005" in reason
    assert "dcmiv2_init returned -8008 (DCMI_ERR_CODE_DEVICE_NOT_EXIST)" in reason
    assert str(fake_lib) in reason


def test_missing_library_names_every_path_tried(make_handle, table, tmp_path):
    absent = tmp_path / "nowhere" / "libdcmi.so"
    handle = make_handle(absent, ascend_home=str(tmp_path / "Ascend"))
    with pytest.raises(VendorUnavailable) as info:
        handle.startup()
    reason = info.value.reason
    assert info.value.vendor == "ascend"
    assert reason.startswith("Ascend DCMI library (libdcmi.so) not found; tried ")
    assert f"{absent}: " in reason
    assert f"{tmp_path}/Ascend/driver/lib64/driver/libdcmi.so" in reason
    assert "/usr/local/dcmi/libdcmi.so" in reason
    assert "cannot open shared object file" in reason
    assert "library_path" in reason


def test_host_root_candidates_come_first_under_the_root(tmp_path):
    from xpushare_ascend.config import AscendConfig

    config = AscendConfig(host_root="/host", library_path="/opt/x/libdcmi.so")
    candidates = library.library_candidates(config)
    assert candidates[:4] == [
        "/opt/x/libdcmi.so",
        "/host/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
        "/host/usr/local/Ascend/driver/lib64/libdcmi.so",
        "/host/usr/local/dcmi/libdcmi.so",
    ]
    assert candidates[-1] == "libdcmi.so"


def test_a_missing_required_symbol_is_a_clear_error(make_handle, fake_builds, table):
    table.chips(chip_line(0))
    lib = fake_builds.get("OMIT_dcmi_get_device_phyid_from_logicid")
    handle = make_handle(lib)
    with pytest.raises(MissingSymbol) as info:
        handle.startup()
    assert info.value.symbol == "dcmi_get_device_phyid_from_logicid"
    assert "upgrade the driver" in str(info.value)


def test_a_missing_optional_symbol_only_drops_that_reading(make_handle, fake_builds, table):
    table.chips(chip_line(0))
    handle = make_handle(fake_builds.get("OMIT_dcmi_get_device_die_v2"))
    handle.startup()
    # No die id: the chip cannot be keyed, so it is left out rather than keyed by PCI.
    assert handle.detect() == ()


def test_every_call_runs_on_the_vendors_own_thread(make_handle, fake_builds, table):
    lib = fake_builds.get(name="libdcmi-fake-threads.so")
    table.chips(chip_line(0))
    handle = make_handle(lib)
    handle.startup()
    devices = handle.detect()
    handle.monitor(devices)
    handle.check_health(devices, 0.0)
    assert native(lib, "fake_dcmi_threads_seen")() == 1
    assert native(lib, "fake_dcmi_last_thread", ctypes.c_long)() == handle.context.library.native_id


@pytest.mark.parametrize(
    ("struct", "name"),
    [
        (library.ChipInfoV1, "dcmi_chip_info"),
        (library.ChipInfoV2, "dcmi_chip_info_v2"),
        (library.HbmInfo, "dcmi_hbm_info"),
        (library.MemoryInfoV3, "dcmi_get_memory_info_stru"),
        (library.PcieInfoAll, "dcmi_pcie_info_all"),
        (library.DieId, "dcmi_die_id"),
        (library.EccInfo, "dcmi_ecc_info"),
    ],
)
def test_ctypes_layouts_match_the_c_compiler(fake_lib: Path, struct, name):
    sizeof = native(fake_lib, "fake_dcmi_sizeof", ctypes.c_ulong)
    sizeof.argtypes = [ctypes.c_char_p]
    assert ctypes.sizeof(struct) == sizeof(name.encode())

"""Detection through the real path: host -> vendor thread -> ctypes -> the fake libcndev.so."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
from cambricon_fakes import card_line, native

from xpushare.errors import PluginError, VendorUnavailable
from xpushare.native import MissingSymbol
from xpushare_cambricon import library


def test_detect_reports_every_card_with_its_facts(make_handle, fake_lib, table, tmp_path):
    numa = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:3c:00.0"
    numa.mkdir(parents=True)
    (numa / "numa_node").write_text("1\n")
    table.cards(card_line(0), card_line(1, name="MLU370-S4", mem=24576, cores=6))
    handle = make_handle(fake_lib)
    handle.startup()
    first, second = handle.detect()

    assert first.id == "MLU-00001012-1916-0000-0000-000000000000"
    assert (first.index, second.index) == (0, 1)
    assert first.vendor == "cambricon"
    assert first.model == "MLU370-X8" and second.model == "MLU370-S4"
    assert first.memory_mib == 49152 and second.memory_mib == 24576
    assert first.compute_units == 8 and second.compute_units == 6
    assert first.pci_bus_id == "0000:3b:00.0"
    assert (first.numa_node, second.numa_node) == (None, 1)
    assert first.healthy
    assert first.share_slots == 16
    assert first.mode == "smlu"
    # The fake hands out handles 100 + slot: the plugin uses them, not the slot.
    assert first.extra == {"slot": "0", "handle": "100", "smlu": "true"}


def test_a_card_whose_driver_cannot_cut_smlus_is_whole_only(make_handle, fake_lib, table):
    table.cards(card_line(0, smlu=0))
    handle = make_handle(fake_lib)
    handle.startup()
    (card,) = handle.detect()
    assert card.share_slots == 1 and card.mode == "exclusive"
    assert card.extra["smlu"] == "false"


def test_a_library_without_the_smlu_api_serves_whole_cards(make_handle, fake_builds, table):
    table.cards(card_line(0))
    handle = make_handle(fake_builds.get("NO_SMLU"))
    handle.startup()
    (card,) = handle.detect()
    assert card.share_slots == 1 and card.extra["smlu"] == "false"


def test_an_old_library_is_addressed_by_card_index(make_handle, fake_builds, table):
    table.cards(card_line(0), card_line(1, name="MLU290"))
    handle = make_handle(fake_builds.get("NO_HANDLES", "OLD_NAMES"))
    handle.startup()
    first, second = handle.detect()
    assert (first.extra["handle"], second.extra["handle"]) == ("0", "1")
    assert second.model == "MLU290"
    assert handle.monitor([first, second]) is not None


def test_no_cards_is_an_empty_inventory(make_handle, fake_lib, table):
    table.cards(extra=("fail cndevGetDeviceCount 12",))  # CNDEV_ERROR_NO_DEVICES
    handle = make_handle(fake_lib)
    handle.startup()
    assert handle.detect() == ()


def test_a_card_without_a_uuid_is_left_out(make_handle, fake_lib, table):
    table.cards(card_line(0), card_line(1, uuid=""))
    handle = make_handle(fake_lib)
    handle.startup()
    assert [d.index for d in handle.detect()] == [0]


def test_a_failing_call_is_an_error_not_an_empty_list(make_handle, fake_lib, table):
    table.cards(card_line(0), extra=("fail cndevGetMemoryUsage 7",))
    handle = make_handle(fake_lib)
    handle.startup()
    with pytest.raises(PluginError) as info:
        handle.detect()
    message = str(info.value)
    assert "cndevGetMemoryUsage" in message and "CNDEV_ERROR_UNKNOWN" in message
    assert "handle 100" in message


def test_a_driver_cndev_refuses_makes_the_vendor_inactive(make_handle, fake_lib, table):
    table.cards(card_line(0), extra=("init 1",))  # CNDEV_ERROR_NO_DRIVER
    handle = make_handle(fake_lib)
    with pytest.raises(VendorUnavailable) as info:
        handle.startup()
    assert "cndevInit" in info.value.reason and "CNDEV_ERROR_NO_DRIVER" in info.value.reason
    assert str(fake_lib) in info.value.reason


def test_missing_library_names_every_path_tried(make_handle, table, tmp_path):
    absent = tmp_path / "nowhere" / "libcndev.so"
    handle = make_handle(absent, neuware_home=str(tmp_path / "neuware"))
    with pytest.raises(VendorUnavailable) as info:
        handle.startup()
    reason = info.value.reason
    assert reason.startswith("Cambricon CNDev library (libcndev.so) not found; tried ")
    assert f"{absent}: " in reason
    assert f"{tmp_path}/neuware/lib64/libcndev.so" in reason
    assert "cannot open shared object file" in reason
    assert "neuware_home" in reason


def test_host_root_candidates_come_first_under_the_root():
    from xpushare_cambricon.config import CambriconConfig

    config = CambriconConfig(host_root="/host", neuware_home="/usr/local/neuware")
    assert library.library_candidates(config)[:2] == [
        "/host/usr/local/neuware/lib64/libcndev.so",
        "/host/usr/local/neuware/lib/libcndev.so",
    ]
    assert library.library_candidates(config)[-1] == "libcndev.so"


def test_a_missing_required_symbol_is_a_clear_error(make_handle, fake_builds, table):
    table.cards(card_line(0))
    handle = make_handle(fake_builds.get("OMIT_cndevGetCardHealthState"))
    with pytest.raises(MissingSymbol) as info:
        handle.startup()
    assert info.value.symbol == "cndevGetCardHealthState"


def test_every_call_runs_on_the_vendors_own_thread(make_handle, fake_builds, table):
    lib = fake_builds.get(name="libcndev-fake-threads.so")
    table.cards(card_line(0))
    handle = make_handle(lib)
    handle.startup()
    devices = handle.detect()
    handle.monitor(devices)
    handle.check_health(devices, 0.0)
    assert native(lib, "fake_cndev_threads_seen")() == 1
    thread = native(lib, "fake_cndev_last_thread", ctypes.c_long)()
    assert thread == handle.context.library.native_id


@pytest.mark.parametrize(
    ("struct", "name"),
    [
        (library.CardInfo, "cndevCardInfo_t"),
        (library.UUIDInfo, "cndevUUID_t"),
        (library.MemoryInfo, "cndevMemoryInfo_t"),
        (library.CoreCount, "cndevCardCoreCount_t"),
        (library.HealthState, "cndevCardHealthState_t"),
        (library.UtilizationInfo, "cndevUtilizationInfo_t"),
        (library.PCIeInfo, "cndevPCIeInfo_t"),
        (library.TemperatureInfo, "cndevTemperatureInfo_t"),
        (library.PowerInfo, "cndevPowerInfo_t"),
        (library.SMluSet, "cndevSMluSet_t"),
        (library.SMluProfileIdInfo, "cndevSMluProfileIdInfo_t"),
        (library.SMluProfileInfo, "cndevSMluProfileInfo_t"),
        (library.SMluInfo, "cndevSMluInfo_t"),
    ],
)
def test_ctypes_layouts_match_the_c_compiler(fake_lib: Path, struct, name):
    sizeof = native(fake_lib, "fake_cndev_sizeof", ctypes.c_ulong)
    sizeof.argtypes = [ctypes.c_char_p]
    assert ctypes.sizeof(struct) == sizeof(name.encode())

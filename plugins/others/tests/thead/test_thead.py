"""The T-Head plugin against a fake HGML compiled from C, through the real plugin host."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.errors import VendorUnavailable
from xpushare.models import AllocateRequest, ContainerView, DeviceSlice, PodRef, PodView
from xpushare.native import MissingSymbol
from xpushare.plugins import VendorHandle

GIB = 1024**3
SOURCE = Path(__file__).parent / "fake_hgml" / "fake_hgml.c"
PPU = "alibabacloud.com/ppu"


def ppu(index: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "uuid": f"PPU-{index}",
        "name": "PPU-ZW810E",
        "mem_total": 96 * GIB,
        "mem_used": 2 * GIB,
        "bus_id": f"00000000:{0x60 + index:02X}:00.0",
        "minor": 10 + index,
        "ecc_ue": 0,
        "util": 64,
        "temp": 55,
        "power_mw": 301_500,
    }
    row.update(overrides)
    return row


@pytest.fixture
def table(table_for: Callable[[str], Any]) -> Any:
    t = table_for("FAKE_HGML_TABLE")
    t.write(ppu(0), ppu(1), driver="1.5.1")
    return t


def started(thead: Callable[..., VendorHandle], **config: Any) -> VendorHandle:
    handle = thead(**config)
    handle.startup()
    return handle


def test_detect_reports_each_ppu(table: Any, thead: Any, tmp_path: Path) -> None:
    numa = tmp_path / "sys/bus/pci/devices/0000:61:00.0"
    numa.mkdir(parents=True)
    (numa / "numa_node").write_text("1\n")
    first, second = started(thead).detect()
    assert (first.id, first.index, second.index) == ("PPU-0", 0, 1)
    assert first.model == "PPU-ZW810E" and first.memory_mib == 96 * 1024
    assert first.pci_bus_id == "0000:60:00.0" and second.numa_node == 1
    assert first.extra == {"driver_version": "1.5.1", "minor": "10"} and first.healthy


def test_missing_library_makes_the_vendor_inactive_naming_ppu_home(
    table: Any, thead: Any, tmp_path: Path
) -> None:
    with pytest.raises(VendorUnavailable) as caught:
        thead(library_path=str(tmp_path / "none/libhgml.so")).startup()
    assert "/usr/local/PPU_SDK/lib64/libhgml.so" in caught.value.reason
    assert "/usr/local/PPU_SDK/lib/libhgml.so" in caught.value.reason


def test_init_failure_names_the_code(table: Any, thead: Any) -> None:
    table.write(ppu(0), init=9)
    with pytest.raises(VendorUnavailable, match=r"hgmlInit_v2 returned 9 \(DRIVER_NOT_LOADED\)"):
        thead().startup()


def test_a_missing_symbol_is_a_clear_error(
    table: Any, thead: Any, compile_fake: Callable[..., Path], tmp_path: Path
) -> None:
    old = compile_fake(SOURCE, tmp_path / "old", "libhgml.so", ["FAKE_OMIT_NAME"])
    with pytest.raises(MissingSymbol, match="hgmlDeviceGetName"):
        thead(library_path=str(old)).startup()


def test_uncorrected_ecc_errors_make_a_ppu_unhealthy(table: Any, thead: Any) -> None:
    handle = started(thead)
    devices = handle.detect()
    table.write(ppu(0), ppu(1, ecc_ue=3), driver="1.5.1")
    (event,) = handle.check_health(devices, 0.0) or ()
    assert event.device_id == "PPU-1" and not event.healthy and "3 uncorrected" in event.reason
    assert [d.healthy for d in handle.detect()] == [True, False]


def test_an_hgml_without_ecc_reports_ppus_healthy(
    table: Any, thead: Any, compile_fake: Callable[..., Path], tmp_path: Path
) -> None:
    table.write(ppu(0, ecc_ue=5))
    small = compile_fake(SOURCE, tmp_path / "noecc", "libhgml.so", ["FAKE_OMIT_ECC"])
    handle = started(thead, library_path=str(small))
    devices = handle.detect()
    assert devices[0].healthy and handle.check_health(devices, 0.0) in (None, [], ())


def test_monitor_readings(table: Any, thead: Any) -> None:
    handle = started(thead)
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    s = snapshot.devices[0]
    assert (s.memory_used_mib, s.utilization_percent, s.temperature_c, s.power_w) == (
        2048,
        64.0,
        55.0,
        301.5,
    )


def _alloc(devices: Any, *slices: DeviceSlice) -> AllocateRequest:
    by_id = {d.id: d for d in devices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="p", uid="u1"),
        container="main",
        node="node-a",
        resource_name=PPU,
        slices=slices,
        devices=tuple(by_id[s.device_id] for s in slices),
    )


def _whole(d: Any) -> DeviceSlice:
    return DeviceSlice(device_id=d.id, index=d.index, memory_mib=d.memory_mib, compute_percent=100)


def test_allocate_whole_ppus_gives_their_nodes_only(table: Any, thead: Any) -> None:
    handle = started(thead)
    devices = handle.detect()
    result = handle.allocate(_alloc(devices, _whole(devices[1]), _whole(devices[0])))
    assert [n.host_path for n in result.devices] == [
        "/dev/alixpu",
        "/dev/alixpu_ctl",
        "/dev/alixpu_ppu0",
        "/dev/alixpu_ppu1",
    ]
    assert result.envs == {} and result.mounts == ()


def test_allocate_a_slice_sets_hggc_quota(table: Any, thead: Any) -> None:
    handle = started(thead)
    devices = handle.detect()
    piece = DeviceSlice(device_id="PPU-1", index=1, memory_mib=24576, compute_percent=100)
    result = handle.allocate(_alloc(devices, piece))
    assert result.envs == {
        "HGGC_DEVICE_MEMORY_LIMIT_0": "24576",  # a bare MiB figure, the container's index
        "HGGC_DEVICE_SM_LIMIT": "100",  # given even at 100 %
        "HGGC_LEDGER_PATH": "/var/run/vppu/ledger",
        "LIBHGGC_LOG_LEVEL": "1",
    }
    assert {(m.host_path, m.container_path) for m in result.mounts} == {
        ("/usr/local/vppu/hggc_quota.so", "/usr/local/vppu/hggc_quota.so"),
        ("/usr/local/vppu/hgml_dlsym_hook.so", "/usr/local/vppu/hgml_dlsym_hook.so"),
        ("/usr/local/vppu/ld.so.preload", "/etc/ld.so.preload"),
    }
    assert "/dev/alixpu_ppu1" in [n.host_path for n in result.devices]


def test_a_slice_without_the_shim_on_the_node_is_refused(table: Any, thead: Any) -> None:
    handle = started(thead, quota_dir="/opt/missing")
    piece = DeviceSlice(device_id="PPU-0", index=0, memory_mib=1024, compute_percent=30)
    with pytest.raises(Exception, match="HGGC quota shim"):
        handle.allocate(_alloc(handle.detect(), piece))


def test_a_ppu_node_missing_on_the_host_is_an_error_naming_it(table: Any, thead: Any) -> None:
    table.write(*(ppu(i) for i in range(6)))
    handle = started(thead)
    devices = handle.detect()
    with pytest.raises(Exception, match="/dev/alixpu_ppu5"):
        handle.allocate(_alloc(devices, _whole(devices[5])))


def test_requests_use_gpustacks_sliced_names(thead: Any) -> None:
    handle = thead()
    assert handle.spec.resource_names.all() == (
        PPU,
        "alibabacloud.com/ppu.sliced.memory-mib",
        "alibabacloud.com/ppu.sliced.memory-percentage",
        "alibabacloud.com/ppu.sliced.cores-percentage",
    )
    c = ContainerView(
        name="main",
        limits={PPU: "1", "alibabacloud.com/ppu.sliced.memory-mib": "20480",
                "alibabacloud.com/ppu.sliced.cores-percentage": "40"},
    )  # fmt: skip
    pod = PodView(ref=PodRef(name="p"), containers=(c,))
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    assert (request.memory_mib, request.compute_percent) == (20480, 40)

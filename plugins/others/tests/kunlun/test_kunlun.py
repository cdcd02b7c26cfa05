"""The Kunlun plugins against a fake XPUML compiled from C, through the real plugin host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kunlun_fakes import P800_BYTES, xpu

from xpushare.errors import VendorUnavailable
from xpushare.models import AllocateRequest, DeviceSlice, PodRef

P800_MIB = P800_BYTES // 2**20


def started(kunlun: Any, vendor: str = "kunlun", **config: Any) -> Any:
    handle = kunlun(vendor, **config)
    handle.startup()
    return handle


def test_detect_names_xpus_as_hami_does(table: Any, kunlun: Any) -> None:
    devices = started(kunlun).detect()
    assert [d.id for d in devices] == [f"node-a-kunlun-{i}" for i in range(8)]
    first, last = devices[0], devices[-1]
    assert first.model == "P800" and first.memory_mib == P800_MIB == 98304
    assert first.pci_bus_id == "0000:40:00.0" and first.numa_node == 0 and last.numa_node == 1
    assert first.share_slots == 1 and first.mode == "exclusive"
    assert first.extra == {"minor": "0", "serial": "SN0000"}


def test_serial_ids_and_vxpu_slots(table: Any, kunlun: Any) -> None:
    devices = started(kunlun, "kunlun-vxpu", id_format="serial").detect()
    assert devices[3].id == "SN0003" and devices[3].vendor == "kunlun-vxpu"
    # Four of the smallest slice (24576 MiB) fit in one 98304 MiB XPU.
    assert devices[3].share_slots == 4 and devices[3].mode == "vxpu"


def test_the_mode_decides_which_of_the_two_vendors_a_node_serves(table: Any, kunlun: Any) -> None:
    with pytest.raises(VendorUnavailable, match=r"mode is 'xpu' here.*set mode: vxpu") as caught:
        kunlun("kunlun-vxpu", mode="xpu").startup()
    assert caught.value.vendor == "kunlun-vxpu"
    with pytest.raises(VendorUnavailable, match=r"mode is 'vxpu' here.*set mode: xpu"):
        kunlun("kunlun", mode="vxpu").startup()


def test_missing_library_and_failed_init_make_the_vendor_inactive(
    table: Any, kunlun: Any, tmp_path: Path
) -> None:
    with pytest.raises(VendorUnavailable) as caught:
        kunlun(library_path=str(tmp_path / "x/libxpuml.so")).startup()
    assert "/usr/local/xpu/lib64/libxpuml.so" in caught.value.reason
    table.write(xpu(0), init=9)
    with pytest.raises(VendorUnavailable, match=r"xpumlInit returned 9 \(XPUML_ERROR_DRIVER_NOT"):
        kunlun().startup()


def test_a_bad_state_is_unhealthy_and_health_follows_it(table: Any, kunlun: Any) -> None:
    table.write(xpu(0), xpu(1, state=207))
    handle = started(kunlun)
    devices = handle.detect()
    assert [d.healthy for d in devices] == [True, False]
    assert devices[1].extra["state"] == "in error"
    table.write(xpu(0, state=205), xpu(1))
    events = {e.device_id: e for e in handle.check_health(devices, 0.0) or ()}
    assert not events["node-a-kunlun-0"].healthy and "in reset" in events["node-a-kunlun-0"].reason
    assert events["node-a-kunlun-1"].healthy
    table.write(xpu(0, state_rc=15), xpu(1))
    lost = {e.device_id: e for e in handle.check_health(devices, 0.0) or ()}["node-a-kunlun-0"]
    assert not lost.healthy
    assert "XPUML_ERROR_XPU_IS_LOST" in lost.reason


def test_monitor_reads_xpuml_units(table: Any, kunlun: Any) -> None:
    table.write(xpu(0), xpu(1, util=-1, temp=-1, power_mw=-1))
    handle = started(kunlun)
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    a, b = snapshot.devices
    assert (a.utilization_percent, a.memory_used_mib, a.temperature_c, a.power_w) == (
        30.0,
        2048,
        45.0,
        150.0,
    )
    assert (b.utilization_percent, b.temperature_c, b.power_w) == (None, None, None)


def _alloc(devices: Any, resource: str, *slices: DeviceSlice) -> AllocateRequest:
    by_id = {d.id: d for d in devices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="p", uid="u1"),
        container="main",
        node="node-a",
        resource_name=resource,
        slices=slices,
        devices=tuple(by_id[s.device_id] for s in slices),
    )


def test_allocate_gives_the_xpu_nodes_and_visible_devices(table: Any, kunlun: Any) -> None:
    table.write(*(xpu(i, minor=10 + i) for i in range(8)))
    handle = started(kunlun)
    devices = handle.detect()
    pieces = [
        DeviceSlice(device_id=devices[i].id, index=i, memory_mib=P800_MIB, compute_percent=100)
        for i in (0, 4)
    ]
    root = Path(handle.context.config["host_root"])
    (root / "dev/xpu10").touch()
    (root / "dev/xpu14").touch()
    result = handle.allocate(_alloc(devices, "kunlunxin.com/xpu", *pieces))
    assert [n.host_path for n in result.devices] == ["/dev/xpuctrl", "/dev/xpu10", "/dev/xpu14"]
    assert result.envs == {
        "XPU_VISIBLE_DEVICES": "0,4",
        "XPUSHARE_KUNLUN_DEVICES": "node-a-kunlun-0,node-a-kunlun-4",
    }
    (root / "dev/xpu14").unlink()
    with pytest.raises(
        Exception, match=r"node-a-kunlun-4 \(index 4\) has no device node /dev/xpu14"
    ):
        handle.allocate(_alloc(devices, "kunlunxin.com/xpu", *pieces))
    (root / "dev/xpuctrl").unlink()
    with pytest.raises(Exception, match=r"control node /dev/xpuctrl does not exist"):
        handle.allocate(_alloc(devices, "kunlunxin.com/xpu", pieces[0]))


def test_allocate_names_the_vxpu_slice(table: Any, kunlun: Any) -> None:
    handle = started(kunlun, "kunlun-vxpu")
    devices = handle.detect()
    piece = DeviceSlice(device_id=devices[2].id, index=2, memory_mib=24576, compute_percent=25)
    result = handle.allocate(_alloc(devices, "kunlunxin.com/vxpu", piece))
    assert [n.host_path for n in result.devices] == ["/dev/xpuctrl", "/dev/xpu2"]
    assert result.envs["XPU_VISIBLE_DEVICES"] == "2"
    assert result.envs["XPUSHARE_KUNLUN_VXPU_MEMORY_MIB"] == "24576"

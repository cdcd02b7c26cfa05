"""The Hygon plugin against a fake ROCm SMI compiled from C, through the real plugin host."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.errors import VendorUnavailable
from xpushare.models import (
    AllocateRequest,
    ContainerView,
    Device,
    DeviceSlice,
    PodRef,
    PodView,
)
from xpushare.native import MissingSymbol
from xpushare.plugins import VendorHandle

GIB = 1024**3
SOURCE = Path(__file__).parent / "fake_rsmi" / "fake_rocm_smi.c"


def dcu(index: int, **overrides: Any) -> dict[str, Any]:
    """A device row of the fake's table: a 64 GiB DCU on bus 0x1<index>."""
    row: dict[str, Any] = {
        "name": "K100_AI",
        "uid": hex(0xABC0 + index),
        "bus": hex(0x10 + index),
        "numa": index % 2,
        "mem_total": 64 * GIB,
        "mem_used": 2 * GIB,
        "busy": 30 + index,
        "temp_mc": 45500,
        "power_uw": 150_000_000,
        "ecc_ue": 0,
        "render": 128 + index,
    }
    row.update(overrides)
    return row


@pytest.fixture
def table(table_for: Callable[[str], Any]) -> Any:
    t = table_for("FAKE_RSMI_TABLE")
    t.write(dcu(0), dcu(1))
    return t


def started(hygon: Callable[..., VendorHandle], **config: Any) -> VendorHandle:
    handle = hygon(**config)
    handle.startup()
    return handle


def test_detect_reports_each_dcu_with_its_facts(table: Any, hygon: Any) -> None:
    devices = started(hygon).detect()
    assert [d.id for d in devices] == ["DCU-000000000000abc0", "DCU-000000000000abc1"]
    first = devices[0]
    assert first.vendor == "hygon" and first.index == 0
    assert first.model == "K100_AI"
    assert first.memory_mib == 64 * 1024
    assert first.compute_units == 80  # simd_count 320 / simd_per_cu 4 from KFD topology
    assert first.share_slots == 4
    assert first.pci_bus_id == "0000:10:00.0"
    assert (first.numa_node, devices[1].numa_node) == (0, 1)
    assert first.healthy
    assert first.extra == {
        "hami_id": "DCU-0",
        "driver_version": "6.2.17",
        "render_minor": "128",
        "card_minor": "0",
    }


def test_a_dcu_without_unique_id_is_named_by_its_pci_address(table: Any, hygon: Any) -> None:
    table.write(dcu(0, uid=0, numa=-1))
    (device,) = started(hygon).detect()
    assert device.id == "DCU-0000:10:00.0"
    assert device.numa_node is None


def test_no_dcus_is_an_empty_list(table: Any, hygon: Any) -> None:
    table.write()
    assert started(hygon).detect() == ()


def test_missing_library_makes_the_vendor_inactive_naming_every_path(
    table: Any, hygon: Any, tmp_path: Path
) -> None:
    handle = hygon(
        library_path=str(tmp_path / "nowhere/librocm_smi64.so"), driver_roots=["/hostfs"]
    )
    with pytest.raises(VendorUnavailable) as caught:
        handle.startup()
    reason = caught.value.reason
    assert str(tmp_path / "nowhere/librocm_smi64.so") in reason
    assert "/hostfs/opt/hyhal/lib/librocm_smi64.so" in reason
    assert "/opt/dtk/rocm_smi/lib/librocm_smi64.so" in reason


def test_failed_init_says_what_the_library_answered(table: Any, hygon: Any) -> None:
    table.write(dcu(0), init=8)
    with pytest.raises(VendorUnavailable, match=r"rsmi_init returned 8 \(RSMI_STATUS_INIT_ERROR\)"):
        hygon().startup()


def test_a_missing_symbol_is_a_clear_error(
    table: Any, hygon: Any, compile_fake: Callable[..., Path], tmp_path: Path
) -> None:
    old = compile_fake(SOURCE, tmp_path / "old", "librocm_smi64.so", ["FAKE_OMIT_ECC"])
    with pytest.raises(MissingSymbol, match="rsmi_dev_ecc_count_get"):
        hygon(library_path=str(old)).startup()


def test_health_follows_uncorrectable_ecc_errors(table: Any, hygon: Any) -> None:
    handle = started(hygon)
    devices = handle.detect()
    assert handle.check_health(devices, 0.0) == ()
    table.write(dcu(0), dcu(1, ecc_ue=3))
    (event,) = handle.check_health(devices, 0.0) or ()
    assert event.device_id == devices[1].id and not event.healthy
    assert "3 uncorrectable ECC" in event.reason
    sick = [d.model_copy(update={"healthy": d.id != devices[1].id}) for d in devices]
    table.write(dcu(0), dcu(1))
    (back,) = handle.check_health(sick, 0.0) or ()
    assert back.healthy and back.device_id == devices[1].id


def test_monitor_converts_vendor_units(table: Any, hygon: Any) -> None:
    handle = started(hygon)
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    first = snapshot.devices[0]
    assert first.memory_used_mib == 2048 and first.memory_total_mib == 65536
    assert first.utilization_percent == 30.0
    assert first.temperature_c == 45.5  # millidegrees
    assert first.power_w == 150.0  # microwatts
    table.write(dcu(0, busy=-1), dcu(1))
    again = handle.monitor(handle.detect())
    assert again is not None and again.devices[0].utilization_percent is None


def _request(
    devices: tuple[Device, ...], *slices: DeviceSlice, container: str = "main"
) -> AllocateRequest:
    by_id = {d.id: d for d in devices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="train", uid="uid-1"),
        container=container,
        node="node-a",
        resource_name="hygon.com/dcunum",
        slices=slices,
        devices=tuple(by_id[s.device_id] for s in slices),
    )


def test_allocate_whole_dcus_gives_kfd_and_their_drm_nodes(table: Any, hygon: Any) -> None:
    handle = started(hygon)
    devices = handle.detect()
    whole = [
        DeviceSlice(
            device_id=d.id,
            index=d.index,
            memory_mib=d.memory_mib,
            compute_percent=100,
            exclusive=True,
        )
        for d in devices
    ]
    result = handle.allocate(_request(devices, *whole))
    assert [(n.host_path, n.permissions) for n in result.devices] == [
        ("/dev/kfd", "rwm"),
        ("/dev/mkfd", "rwm"),
        ("/dev/dri/card0", "rw"),
        ("/dev/dri/renderD128", "rw"),
        ("/dev/dri/card1", "rw"),
        ("/dev/dri/renderD129", "rw"),
    ]
    assert result.mounts == ()
    assert result.envs == {"XPUSHARE_HYGON_DEVICES": "DCU-000000000000abc0,DCU-000000000000abc1"}


def test_allocate_a_slice_writes_a_vdcu_config_and_mounts_it(
    table: Any, hygon: Any, tmp_path: Path
) -> None:
    handle = started(hygon)
    devices = handle.detect()
    quarter = DeviceSlice(device_id=devices[1].id, index=1, memory_mib=8192, compute_percent=25)
    result = handle.allocate(_request(devices, quarter))
    conf = tmp_path / "vdev/uid-1_main/vdev0.conf"
    assert conf.read_text() == (
        "PciBusId: 0000:11:00.0\ncu_mask: 0xfffff\ncu_count: 20\nmem: 8192 MiB\n"
        "device_id: 0\nvdev_id: 0\npipe_id: 0\nenable: 1\n"
    )
    mounts = {(m.host_path, m.container_path, m.read_only) for m in result.mounts}
    assert mounts == {
        ("/usr/local/vgpu/dcu/uid-1_main", "/etc/vdev/docker", True),
        ("/opt/dtk", "/opt/hygondriver", True),
        ("/opt/hyhal", "/opt/hyhal", True),
    }
    # A second container on the same DCU gets the next, disjoint CUs and its own ids.
    handle.allocate(_request(devices, quarter, container="side"))
    side = (tmp_path / "vdev/uid-1_side/vdev0.conf").read_text()
    assert "cu_mask: 0xfffff00000\n" in side and "vdev_id: 1\n" in side and "pipe_id: 1\n" in side
    # kubelet retrying the first container's Allocate finds its config again.
    handle.allocate(_request(devices, quarter))
    assert conf.read_text().startswith("PciBusId: 0000:11:00.0\ncu_mask: 0xfffff\n")


def test_a_slice_larger_than_the_free_cus_is_refused_naming_the_dcu(table: Any, hygon: Any) -> None:
    handle = started(hygon)
    devices = handle.detect()
    big = DeviceSlice(device_id=devices[0].id, index=0, memory_mib=4096, compute_percent=75)
    handle.allocate(_request(devices, big, container="a"))
    with pytest.raises(Exception, match=r"DCU 0000:10:00.0 has 20 free compute unit\(s\) of 80"):
        handle.allocate(_request(devices, big, container="b"))


def test_shutdown_releases_the_library(table: Any, hygon: Any, rsmi_lib: Path) -> None:
    handle = started(hygon)
    fake = ctypes.CDLL(str(rsmi_lib))
    before = fake.fake_rsmi_shutdown_calls()
    handle.shutdown()
    assert fake.fake_rsmi_shutdown_calls() == before + 1


def _pod(**limits: str) -> tuple[PodView, ContainerView]:
    container = ContainerView(name="main", limits=limits)
    return PodView(ref=PodRef(name="p"), containers=(container,)), container


def test_requests_default_to_all_cores_as_in_hami(hygon: Any) -> None:
    handle = hygon()
    pod, c = _pod(**{"hygon.com/dcunum": "1", "hygon.com/dcumem": "8000"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    assert request.memory_mib == 8000 and request.compute_percent == 100 and request.exclusive
    pod, c = _pod(**{"hygon.com/dcunum": "1", "hygon.com/dcucores": "30"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None and request.compute_percent == 30 and not request.exclusive
    pod, c = _pod(**{"nvidia.com/gpu": "1"})
    assert handle.resource_request(pod=pod, container=c) is None


def test_sharing_several_dcus_in_one_container_is_refused(hygon: Any) -> None:
    pod, c = _pod(**{"hygon.com/dcunum": "2", "hygon.com/dcucores": "50"})
    with pytest.raises(ValueError, match="may use only one DCU"):
        hygon().resource_request(pod=pod, container=c)
    pod, c = _pod(**{"hygon.com/dcunum": "2"})
    request = hygon().resource_request(pod=pod, container=c)
    assert request is not None and request.count == 2 and request.exclusive

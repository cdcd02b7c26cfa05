"""Monitoring: NVML readings per GPU, and per-container usage from HAMi-core's files."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_hamicore import Proc, Region, v0_bytes, v1_bytes, write
from fake_nvml import NOT_SUPPORTED, UNKNOWN, FakeNvml, uuid

from xpushare.models import AllocateRequest, ContainerUsage, DeviceSlice, PodRef
from xpushare.plugins import VendorHandle
from xpushare_nvidia import hamicore


def test_device_readings(nvidia: Callable[..., VendorHandle], fake: FakeNvml) -> None:
    fake.add_gpus(2)
    fake.set(0, "util_gpu", 37)
    fake.set(0, "mem_used_mib", 2048)
    fake.set(0, "temp", 61)
    fake.set(0, "power_mw", 245_500)
    fake.add_process(0, 1234, 1000)
    fake.add_process(0, 1235, 1048)
    handle = nvidia()
    devices = handle.detect()
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    first = snapshot.devices[0]
    assert first.device_id == uuid(0)
    assert first.utilization_percent == 37.0
    assert (first.memory_used_mib, first.memory_total_mib) == (2048, 81920)
    assert first.temperature_c == 61.0
    assert first.power_w == 245.5
    assert first.process_count == 2
    assert first.healthy
    assert snapshot.devices[1].process_count == 0


def test_what_nvml_cannot_measure_is_absent_not_zero(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2)
    fake.enable_mig(1)  # MIG-mode GPUs have no whole-GPU utilization
    fake.fail("nvmlDeviceGetPowerUsage", NOT_SUPPORTED)
    fake.fail("nvmlDeviceGetTemperature", UNKNOWN, gpu=0)
    handle = nvidia()
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    first, second = snapshot.devices
    assert (first.power_w, first.temperature_c) == (None, None)
    assert first.utilization_percent == 0.0
    assert second.utilization_percent is None
    assert second.temperature_c == 30.0


def allocate_shared(handle: VendorHandle, pod: str, uid: str, device: object) -> None:
    handle.allocate(
        AllocateRequest(
            pod=PodRef(namespace="team-a", name=pod, uid=uid),
            container="main",
            node="gpu-node-1",
            resource_name="nvidia.com/gpu",
            slices=(DeviceSlice(device_id=uuid(0), memory_mib=8000, compute_percent=30),),
            devices=(device,),  # type: ignore[arg-type]
        )
    )


def test_per_container_usage_from_hami_core_files(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    fake.add_gpus(2)
    handle = nvidia()
    devices = handle.detect()
    allocate_shared(handle, "trainer", "uid-1", devices[0])
    region = Region(
        uuids=[uuid(0)],
        limits_mib=[8000],
        sm_limits=[30],
        procs=[
            Proc(pid=10, used_mib={0: 1500}, sm_util={0: 12}),
            Proc(pid=11, used_mib={0: 500}, sm_util={0: 8}),
        ],
    )
    write(hami_dir / "containers/uid-1_main", v1_bytes(region))
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    assert snapshot.containers == (
        ContainerUsage(
            device_id=uuid(0),
            namespace="team-a",
            pod="trainer",
            container="main",
            memory_used_mib=2000,
            memory_limit_mib=8000,
            utilization_percent=20.0,
        ),
    )


def test_a_container_hami_allocated_before_migration_is_named_by_pod_uid(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    fake.add_gpus(2)
    handle = nvidia()
    devices = handle.detect()
    region = Region(uuids=[uuid(1), uuid(0)], limits_mib=[0, 1024], sm_limits=[0, 10])
    region.procs = [Proc(pid=5, used_mib={0: 300, 1: 100})]
    # HAMi's plugin names the cache file with a random UUID.
    write(hami_dir / "containers/0f0e-77_worker", v1_bytes(region), "3b1c9a0e.cache")
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    by_device = {c.device_id: c for c in snapshot.containers}
    assert by_device[uuid(1)].pod == "0f0e-77"
    assert by_device[uuid(1)].memory_limit_mib is None  # 0: no limit
    assert by_device[uuid(1)].memory_used_mib == 300
    assert by_device[uuid(0)].memory_used_mib == 100


def test_version_0_files_are_read(tmp_path: Path) -> None:
    region = Region(
        uuids=[uuid(3)],
        limits_mib=[4096],
        sm_limits=[50],
        procs=[Proc(pid=1, used_mib={0: 700}, sm_util={0: 5}), Proc(pid=2, used_mib={0: 24})],
        priority=0,
    )
    path = write(tmp_path, v0_bytes(region))
    read = hamicore.read_region(path)
    assert read.version == 0
    (use,) = read.devices
    assert (use.uuid, use.used_bytes, use.limit_bytes, use.sm_limit, use.sm_util) == (
        uuid(3),
        724 * 2**20,
        4096 * 2**20,
        50,
        5,
    )
    assert read.priority == 0


def test_version_1_details(tmp_path: Path) -> None:
    region = Region(
        uuids=[uuid(0), uuid(1)],
        limits_mib=[100, 200],
        sm_limits=[25, 75],
        procs=[Proc(pid=1, used_mib={1: 50}, sm_util={1: 40})],
        priority=3,
        last_kernel_time=1_760_000_000,
    )
    read = hamicore.read_region(write(tmp_path, v1_bytes(region)))
    assert read.version == 1
    assert [(d.uuid, d.used_bytes // 2**20, d.sm_limit, d.sm_util) for d in read.devices] == [
        (uuid(0), 0, 25, 0),
        (uuid(1), 50, 75, 40),
    ]
    assert (read.priority, read.last_kernel_time) == (3, 1_760_000_000)


def good() -> bytearray:
    return v1_bytes(Region(uuids=[uuid(0)], limits_mib=[10], sm_limits=[10], procs=[Proc(1)]))


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda b: b[:8], "too short"),
        (lambda b: b[:500_000], "truncated"),
        (lambda b: bytearray(b"\x00" * len(b)), "not an initialised"),
        (lambda b: bytearray(b"ELF!" + bytes(b[4:])), "not an initialised"),
        (lambda b: b[:4] + struct.pack("<i", 2) + b[8:], "version 2 is not supported"),
        (lambda b: b[:56] + struct.pack("<Q", 10**6) + b[64:], "foreign"),
    ],
    ids=["tiny", "truncated", "zeros", "foreign-magic", "version-2", "device-count"],
)
def test_partial_or_foreign_files_are_refused_with_a_reason(
    tmp_path: Path, damage: Callable[[bytearray], bytearray], why: str
) -> None:
    path = write(tmp_path, damage(good()))
    with pytest.raises(hamicore.Unreadable, match=why):
        hamicore.read_region(path)


def test_a_huge_process_count_is_clamped(tmp_path: Path) -> None:
    data = good()
    struct.pack_into("<i", data, 2_008_896, 10**9)
    read = hamicore.read_region(write(tmp_path, data))
    assert read.devices[0].used_bytes == 0  # other slots are empty; no overrun


def test_the_scan_skips_what_it_cannot_read_and_keeps_the_rest(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    fake.add_gpus(1)
    handle = nvidia()
    devices = handle.detect()
    containers = hami_dir / "containers"
    write(containers / "uid-ok_main", good())
    write(containers / "uid-cut_main", good()[:123_456])
    write(containers / "not-a-container-dir", good())
    (containers / "uid-new_main").mkdir()  # allocated, CUDA not started yet
    (containers / "stray-file.cache").write_bytes(b"junk")
    other = v1_bytes(Region(uuids=["GPU-not-on-this-node"], limits_mib=[1], sm_limits=[1]))
    write(containers / "uid-other_main", other)
    # Two files in one directory: the newest readable one counts.
    write(containers / "uid-two_main", good(), "old.cache")
    write(containers / "uid-two_main", b"\x00" * 64, "new.cache")
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    assert sorted(c.pod for c in snapshot.containers) == ["uid-ok", "uid-two"]
    assert all(c.memory_limit_mib == 10 for c in snapshot.containers)


def test_container_usage_can_be_switched_off(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, hami_dir: Path
) -> None:
    fake.add_gpus(1)
    handle = nvidia(container_usage=False)
    write(hami_dir / "containers/uid-ok_main", good())
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None and snapshot.containers == ()

"""Monitoring and health through the real amdsmi wrapper on fake libraries."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

from amd_fakes import GIB, NOT_SUPPORTED, FakeProcess, amd_host, build_library, mi300x

from xpushare.plugins import VendorHandle

Start = Callable[..., VendorHandle]


def test_readings_per_gpu(started: Start) -> None:
    busy = mi300x(
        0,
        gfx_activity=37,
        vram_used=10 * GIB,
        temp_edge=-1,
        temp_hotspot=61,
        power_current=0xFFFF,
        power_average=300,
        procs=[FakeProcess(4242, "python3", 8 * GIB), FakeProcess(4343, "vllm", 2 * GIB)],
    )
    idle = mi300x(1, temp_edge=40, temp_hotspot=52, power_current=140)
    handle = started([busy, idle])
    devices = handle.detect()
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    one, two = snapshot.devices
    assert one.device_id == devices[0].id
    assert one.utilization_percent == 37.0
    assert one.memory_used_mib == 10 * 1024 and one.memory_total_mib == 192 * 1024
    assert one.temperature_c == 61.0  # no edge sensor: the hotspot
    assert one.power_w == 300.0  # no current reading: the average
    assert one.process_count == 2 and one.healthy
    assert (two.temperature_c, two.power_w, two.process_count) == (40.0, 140.0, 0)


def test_readings_the_gpu_cannot_give_are_absent_not_zero(started: Start) -> None:
    unsupported = [
        (fn, -1, NOT_SUPPORTED)
        for fn in (
            "amdsmi_get_gpu_activity",
            "amdsmi_get_gpu_memory_usage",
            "amdsmi_get_temp_metric",
            "amdsmi_get_power_info",
            "amdsmi_get_gpu_process_list",
        )
    ]
    handle = started([mi300x(0)], failures=unsupported)
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    (sample,) = snapshot.devices
    assert sample.utilization_percent is None and sample.memory_used_mib is None
    assert sample.temperature_c is None and sample.power_w is None
    assert sample.process_count is None
    assert sample.memory_total_mib == 192 * 1024


def test_health_changes_follow_uncorrectable_ecc_errors(tmp_path: Path) -> None:
    lib = build_library(tmp_path, [mi300x(0), mi300x(1)])
    fake = ctypes.CDLL(str(lib))
    host = amd_host(lib)
    try:
        handle = host.vendor("amd")
        handle.startup()
        devices = handle.detect()
        assert handle.check_health(devices, 0.0) == ()

        fake.fake_set_ecc_uncorrectable(1, ctypes.c_uint64(2))
        (event,) = handle.check_health(devices, 0.0) or ()
        assert (event.device_id, event.healthy) == (devices[1].id, False)
        assert "2 uncorrectable memory (UMC) ECC error(s)" in event.reason
        snapshot = handle.monitor(devices)
        assert snapshot is not None and not snapshot.devices[1].healthy

        fake.fake_set_ecc_uncorrectable(1, ctypes.c_uint64(0))
        marked = [d.model_copy(update={"healthy": d.id != devices[1].id}) for d in devices]
        (recovered,) = handle.check_health(marked, 0.0) or ()
        assert (recovered.device_id, recovered.healthy) == (devices[1].id, True)
    finally:
        host.close()

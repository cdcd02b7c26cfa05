"""Older drivers: with any one optional NVML symbol missing, detection, monitoring and health
still work with the fields that remain (an R470 driver has no ``*_v3`` process call).

Each case compiles the fake NVML with that one symbol hidden (a linker version script makes
it local), so pynvml finds it missing exactly as it would on the old driver.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_nvml import SONAME, SOURCE, FakeNvml, uuid
from nvidia_kit import NODE, base_config

from xpushare.testing.clib import compile_shared_library
from xpushare.testing.hosts import VendorHosts
from xpushare_nvidia import plugin

#: Every NVML entry point the plugin calls that an older (or smaller) driver may lack. The
#: core ones (init, count, handles, UUID, name, memory) exist in every driver the plugin
#: supports and are not in this list.
OPTIONAL = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetAttributes_v2",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetMigMode",
    "nvmlEventSetCreate",
    "nvmlEventSetWait_v2",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
)


def _variant(tmp_path_factory: pytest.TempPathFactory, hidden: tuple[str, ...]) -> Path:
    root = tmp_path_factory.mktemp("driver-" + "-".join(h[4:20] for h in hidden))
    script = root / "hide.map"
    # An exact name outranks the wildcard: those symbols become local, the rest stay.
    script.write_text("{ global: *; local: " + " ".join(f"{h};" for h in hidden) + " };\n")
    compile_shared_library(
        SOURCE.read_text(encoding="utf-8"),
        root / "usr/lib64",
        SONAME,
        extra_args=["-lpthread", f"-Wl,--version-script={script}"],
    )
    return root


def _run(root: Path, hami_dir: Path, gpus: int = 4):
    fake = FakeNvml(root / "usr/lib64" / SONAME)
    fake.reset()
    fake.add_gpus(gpus)
    fake.nvlink(0, 1)
    fake.add_process(0, 4242, 512)
    try:
        with VendorHosts("nvidia", plugin, node_name=NODE, strict=True) as hosts:
            handle = hosts.handle(base_config(root, hami_dir), start=True)
            devices = handle.detect()
            snapshot = handle.monitor(devices)
            events = handle.check_health(devices, 0.0)
            fake.lose(2)
            later = handle.monitor(devices)
        assert fake.thread_violations == 0
        return devices, snapshot, events, later
    finally:
        fake.reset()


def test_the_hidden_symbol_is_really_missing(tmp_path_factory, hami_dir) -> None:
    import ctypes

    root = _variant(tmp_path_factory, ("nvmlDeviceGetComputeRunningProcesses_v3",))
    lib = ctypes.CDLL(str(root / "usr/lib64" / SONAME))
    assert not hasattr(lib, "nvmlDeviceGetComputeRunningProcesses_v3")
    assert hasattr(lib, "nvmlDeviceGetComputeRunningProcesses_v2")


@pytest.mark.parametrize("symbol", OPTIONAL)
def test_one_missing_symbol_leaves_the_rest_working(symbol, tmp_path_factory, hami_dir) -> None:
    devices, snapshot, events, later = _run(_variant(tmp_path_factory, (symbol,)), hami_dir)
    assert [d.id for d in devices] == [uuid(i) for i in range(4)]
    assert all(d.memory_mib > 0 for d in devices)
    assert snapshot is not None and len(snapshot.devices) == 4
    # Memory is read on every driver: every GPU keeps its figures.
    assert all(s.memory_total_mib for s in snapshot.devices)
    # Processes: _v3, else _v2 (an R470 driver); only the reading itself may be dropped.
    assert snapshot.devices[0].process_count == 1
    assert events is not None
    # A GPU lost later is still seen by the monitor.
    assert later is not None and not later.devices[2].healthy
    if symbol == "nvmlDeviceGetUtilizationRates":
        assert snapshot.devices[0].utilization_percent is None
    if symbol == "nvmlDeviceGetTemperature":
        assert snapshot.devices[0].temperature_c is None


def test_a_driver_with_neither_process_call_drops_that_field_only(
    tmp_path_factory, hami_dir
) -> None:
    root = _variant(
        tmp_path_factory,
        ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"),
    )
    _, snapshot, _, _ = _run(root, hami_dir)
    assert snapshot is not None
    assert [s.process_count for s in snapshot.devices] == [None] * 4
    assert all(s.memory_used_mib is not None for s in snapshot.devices)
    assert all(s.utilization_percent is not None for s in snapshot.devices)

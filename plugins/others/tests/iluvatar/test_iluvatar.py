"""The Iluvatar plugin against a fake IXML compiled from C, through the real plugin host."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.errors import VendorUnavailable
from xpushare.models import AllocateRequest, ContainerView, DeviceSlice, PodRef, PodView
from xpushare.native import MissingSymbol
from xpushare.plugins import VendorHandle
from xpushare_others.iluvatar import plugin

GIB = 1024**3
SOURCE = Path(__file__).parent / "fake_ixml" / "fake_ixml.c"


def gpu(index: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "uuid": f"GPU-ix-{index}",
        "name": "Iluvatar_BI-V150",
        "mem_total": 32 * GIB,
        "mem_used": GIB,
        "bus_id": f"00000000:{0x20 + index:02X}:00.0",
        "minor": index,
        "health": 0,
        "util": 12,
        "temp": 51,
        "power_mw": 98_500,
    }
    row.update(overrides)
    return row


@pytest.fixture
def table(table_for: Callable[[str], Any]) -> Any:
    t = table_for("FAKE_IXML_TABLE")
    t.write(gpu(0), gpu(1), driver="4.2.0")
    return t


def started(iluvatar: Callable[..., VendorHandle], **config: Any) -> VendorHandle:
    handle = iluvatar(**config)
    handle.startup()
    return handle


def test_detect_reports_each_gpu_of_the_served_chip(
    table: Any, iluvatar: Any, tmp_path: Path
) -> None:
    numa = tmp_path / "sys/bus/pci/devices/0000:21:00.0"
    numa.mkdir(parents=True)
    (numa / "numa_node").write_text("1\n")
    table.write(gpu(0), gpu(1), gpu(2, name="Iluvatar_MR-V100"), driver="4.2.0")
    devices = started(iluvatar).detect()
    assert [d.id for d in devices] == ["GPU-ix-0", "GPU-ix-1"]  # the MR-V100 is not served
    first, second = devices
    assert first.model == "Iluvatar_BI-V150" and first.memory_mib == 32 * 1024
    assert first.pci_bus_id == "0000:20:00.0" and second.numa_node == 1
    assert first.share_slots == 10 and first.healthy
    assert first.extra == {"driver_version": "4.2.0", "chip": "BI-V150", "minor": "0"}


def test_missing_library_makes_the_vendor_inactive_naming_every_path(
    table: Any, iluvatar: Any, tmp_path: Path
) -> None:
    with pytest.raises(VendorUnavailable) as caught:
        iluvatar(library_path=str(tmp_path / "none/libixml.so")).startup()
    assert str(tmp_path / "none/libixml.so") in caught.value.reason
    assert "/usr/local/corex/lib64/libixml.so" in caught.value.reason


def test_init_failure_names_the_nvml_return_code(table: Any, iluvatar: Any) -> None:
    table.write(gpu(0), init=9)
    with pytest.raises(VendorUnavailable, match=r"nvmlInit_v2 returned 9 \(DRIVER_NOT_LOADED\)"):
        iluvatar().startup()


def test_a_missing_symbol_is_a_clear_error(
    table: Any, iluvatar: Any, compile_fake: Callable[..., Path], tmp_path: Path
) -> None:
    old = compile_fake(SOURCE, tmp_path / "old", "libixml.so", ["FAKE_OMIT_HEALTH"])
    with pytest.raises(MissingSymbol, match="ixmlDeviceGetHealth"):
        iluvatar(library_path=str(old)).startup()


def test_health_follows_ixml(table: Any, iluvatar: Any) -> None:
    handle = started(iluvatar)
    devices = handle.detect()
    table.write(gpu(0, health=0x4), gpu(1), driver="4.2.0")
    (event,) = handle.check_health(devices, 0.0) or ()
    assert event.device_id == "GPU-ix-0" and not event.healthy and "0x4" in event.reason


def test_monitor_readings(table: Any, iluvatar: Any) -> None:
    handle = started(iluvatar)
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    s = snapshot.devices[1]
    assert (s.memory_used_mib, s.utilization_percent, s.temperature_c, s.power_w) == (
        1024,
        12.0,
        51.0,
        98.5,
    )


def _alloc(devices: Any, *slices: DeviceSlice) -> AllocateRequest:
    by_id = {d.id: d for d in devices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="p", uid="u1"),
        container="main",
        node="node-a",
        resource_name="iluvatar.ai/BI-V150-vgpu",
        slices=slices,
        devices=tuple(by_id[s.device_id] for s in slices),
    )


def test_allocate_whole_gpus_names_them_for_the_runtime(table: Any, iluvatar: Any) -> None:
    handle = started(iluvatar, device_nodes=True)
    devices = handle.detect()
    whole = [
        DeviceSlice(device_id=d.id, index=d.index, memory_mib=d.memory_mib, compute_percent=100)
        for d in devices
    ]
    result = handle.allocate(_alloc(devices, *whole))
    assert result.envs == {"IX_VISIBLE_DEVICES": "GPU-ix-0,GPU-ix-1"}
    assert [n.host_path for n in result.devices] == ["/dev/iluvatar0", "/dev/iluvatar1"]
    assert result.mounts == ()


def test_allocate_a_slice_sets_hami_core_limits(table: Any, iluvatar: Any) -> None:
    handle = started(iluvatar)
    devices = handle.detect()
    piece = DeviceSlice(device_id="GPU-ix-1", index=1, memory_mib=4096, compute_percent=30)
    result = handle.allocate(_alloc(devices, piece))
    assert result.envs == {
        "IX_VISIBLE_DEVICES": "GPU-ix-1",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m",
        "CUDA_DEVICE_SM_LIMIT": "30",
    }
    assert {(m.host_path, m.container_path) for m in result.mounts} == {
        ("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so"),
        ("/usr/local/vgpu/ld.so.preload", "/etc/ld.so.preload"),
    }


def test_a_slice_without_hami_core_on_the_node_is_refused(
    table: Any, iluvatar: Any, tmp_path: Path
) -> None:
    handle = started(iluvatar, hami_core_dir="/opt/missing")
    devices = handle.detect()
    piece = DeviceSlice(device_id="GPU-ix-0", index=0, memory_mib=4096, compute_percent=30)
    with pytest.raises(Exception, match="HAMi-core"):
        handle.allocate(_alloc(devices, piece))


def _pod(**limits: str) -> tuple[PodView, ContainerView]:
    c = ContainerView(name="main", limits=limits)
    return PodView(ref=PodRef(name="p"), containers=(c,)), c


def test_resource_names_and_units_follow_hami_per_chip(table: Any, iluvatar: Any) -> None:
    handle = iluvatar()
    assert handle.spec.resource_names.count == "iluvatar.ai/BI-V150-vgpu"
    pod, c = _pod(**{"iluvatar.ai/BI-V150-vgpu": "1", "iluvatar.ai/BI-V150.vMem": "16"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    assert request.memory_mib == 16 * 256 and request.compute_percent == 0
    pod, c = _pod(**{"iluvatar.ai/BI-V150-vgpu": "2", "iluvatar.ai/BI-V150.vMem": "16"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None and request.exclusive and request.memory_mib is None


def test_another_chip_is_chosen_by_the_config_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "iluvatar.yaml"
    config.write_text("chip: MR-V100\n")
    monkeypatch.setenv("XPUSHARE_ILUVATAR_CONFIG", str(config))
    spec = plugin.iluvatar.xpushare_vendor()
    assert spec.resource_names.all() == (
        "iluvatar.ai/MR-V100-vgpu",
        "iluvatar.ai/MR-V100.vMem",
        "iluvatar.ai/MR-V100.vCore",
    )


def test_admission_gives_each_container_its_name(iluvatar: Any) -> None:
    handle = iluvatar()
    pod, c = _pod(**{"iluvatar.ai/BI-V150-vgpu": "1"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    (patch,) = handle.mutate_admission(pod=pod, container=c, index=0, request=request)
    assert patch.path == "/spec/containers/0/env"
    assert patch.value == [{"name": "SOL_CONTINER_NAME", "value": "main"}]
    with_env = c.model_copy(update={"env": {"A": "1"}})
    (patch,) = handle.mutate_admission(pod=pod, container=with_env, index=2, request=request)
    assert patch.path == "/spec/containers/2/env/-"

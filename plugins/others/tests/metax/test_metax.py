"""The MetaX plugin against a fake MXSML compiled from C, through the real plugin host."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.errors import AdmissionDenied, VendorUnavailable
from xpushare.models import AllocateRequest, ContainerView, DeviceSlice, PodRef, PodView
from xpushare.native import MissingSymbol
from xpushare.plugins import VendorHandle
from xpushare_others.metax import plugin

SOURCE = Path(__file__).parent / "fake_mxsml" / "fake_mxsml.c"
GIB_KIB = 1024**2


def gpu(index: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "uuid": f"GPU-mx-{index}",
        "name": "MXC500",
        "bdf": f"0000:{0x30 + index:02x}:00.0",
        "vram_kib": 64 * GIB_KIB,
        "vram_used_kib": 3 * GIB_KIB,
        "dram_ue": 0,
        "usage": 40,
        "temp_centi": 4250,
        "power_mw": 201_000,
    }
    row.update(overrides)
    return row


@pytest.fixture
def table(table_for: Callable[[str], Any]) -> Any:
    t = table_for("FAKE_MXSML_TABLE")
    t.write(gpu(0), gpu(1))
    return t


def started(metax: Callable[..., VendorHandle], **config: Any) -> VendorHandle:
    handle = metax(**config)
    handle.startup()
    return handle


def test_detect_reports_physical_gpus_and_skips_virtual_functions(table: Any, metax: Any) -> None:
    table.write(gpu(0), gpu(1), gpu(2, mode=2, uuid="GPU-vf"))
    devices = started(metax).detect()
    assert [d.id for d in devices] == ["GPU-mx-0", "GPU-mx-1"]
    first, second = devices
    assert first.model == "MXC500" and first.memory_mib == 64 * 1024
    assert first.pci_bus_id == "0000:30:00.0" and second.numa_node == 1
    assert first.share_slots == 16 and first.mode == "sgpu"
    assert second.extra == {"card_minor": "2", "render_minor": "130"}


def test_whole_gpu_mode_offers_one_slot_per_gpu(table: Any, metax: Any) -> None:
    (first, _) = started(metax, mode="gpu").detect()
    assert first.share_slots == 1 and first.mode == "exclusive"


def test_missing_library_and_failed_init_make_the_vendor_inactive(
    table: Any, metax: Any, tmp_path: Path
) -> None:
    with pytest.raises(VendorUnavailable) as caught:
        metax(library_path=str(tmp_path / "x/libmxsml.so")).startup()
    assert "/opt/maca/lib/libmxsml.so" in caught.value.reason
    table.write(gpu(0), init=21)
    with pytest.raises(VendorUnavailable, match=r"mxSmlInit returned 21"):
        metax().startup()


def test_a_missing_symbol_is_a_clear_error(
    table: Any, metax: Any, compile_fake: Callable[..., Path], tmp_path: Path
) -> None:
    old = compile_fake(SOURCE, tmp_path / "old", "libmxsml.so", ["FAKE_OMIT_ECC"])
    with pytest.raises(MissingSymbol, match="mxSmlGetTotalEccErrors"):
        metax(library_path=str(old)).startup()


def test_health_and_monitor(table: Any, metax: Any) -> None:
    handle = started(metax)
    devices = handle.detect()
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    s = snapshot.devices[0]
    assert (s.memory_used_mib, s.utilization_percent, s.temperature_c, s.power_w) == (
        3072,
        40.0,
        42.5,
        201.0,
    )
    table.write(gpu(0), gpu(1, dram_ue=2))
    (event,) = handle.check_health(devices, 0.0) or ()
    assert event.device_id == "GPU-mx-1" and not event.healthy


def _alloc(devices: Any, *slices: DeviceSlice) -> AllocateRequest:
    by_id = {d.id: d for d in devices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="p", uid="u1"),
        container="main",
        node="node-a",
        resource_name="metax-tech.com/sgpu",
        slices=slices,
        devices=tuple(by_id[s.device_id] for s in slices),
    )


def test_allocate_gives_control_and_drm_nodes_and_names_slices(table: Any, metax: Any) -> None:
    handle = started(metax)
    devices = handle.detect()
    piece = DeviceSlice(device_id="GPU-mx-1", index=1, memory_mib=8192, compute_percent=25)
    result = handle.allocate(_alloc(devices, piece))
    assert [n.host_path for n in result.devices] == [
        "/dev/mxcd",
        "/dev/dri/card2",
        "/dev/dri/renderD130",
    ]
    assert result.envs == {
        "XPUSHARE_METAX_DEVICES": "GPU-mx-1",
        "METAX_SGPUS": "sgpu=0000:31:00.0;compute=25;vram=8192",
    }
    whole = DeviceSlice(device_id="GPU-mx-0", index=0, memory_mib=65536, compute_percent=100)
    assert handle.allocate(_alloc(devices, whole)).envs == {"XPUSHARE_METAX_DEVICES": "GPU-mx-0"}


def test_the_pods_qos_policy_reaches_its_sgpu_slices(table: Any, metax: Any) -> None:
    handle = started(metax)
    devices = handle.detect()
    piece = DeviceSlice(device_id="GPU-mx-1", index=1, memory_mib=8192, compute_percent=25)
    request = _alloc(devices, piece).model_copy(
        update={"pod_annotations": {"metax-tech.com/sgpu-qos-policy": "fixed-share"}}
    )
    result = handle.allocate(request)
    assert result.envs["XPUSHARE_METAX_QOS_POLICY"] == "fixed-share"
    assert result.annotations == {"metax-tech.com/sgpu-qos-policy": "fixed-share"}
    # A policy the webhook would refuse is not passed on.
    odd = _alloc(devices, piece).model_copy(
        update={"pod_annotations": {"metax-tech.com/sgpu-qos-policy": "all-of-it"}}
    )
    assert "XPUSHARE_METAX_QOS_POLICY" not in handle.allocate(odd).envs


def test_the_pods_app_class_reaches_its_sgpu_slices(table: Any, metax: Any) -> None:
    handle = started(metax)
    devices = handle.detect()
    # An online slice books no compute (HAMi's cores 0) and says so to MetaX's runtime.
    piece = DeviceSlice(device_id="GPU-mx-1", index=1, memory_mib=8192, compute_percent=0,
                        partition="sgpu-app-class=online")  # fmt: skip
    app = "metax-tech.com/sgpu-app-class"
    request = _alloc(devices, piece).model_copy(update={"pod_annotations": {app: "online"}})
    result = handle.allocate(request)
    assert result.envs["XPUSHARE_METAX_APP_CLASS"] == "online"
    assert result.envs["METAX_SGPUS"] == "sgpu=0000:31:00.0;compute=0;vram=8192"
    assert result.annotations == {app: "online"}
    odd = _alloc(devices, piece).model_copy(update={"pod_annotations": {app: "batch"}})
    assert "XPUSHARE_METAX_APP_CLASS" not in handle.allocate(odd).envs


def _pod(
    annotations: dict[str, str] | None = None, /, **limits: str
) -> tuple[PodView, ContainerView]:
    c = ContainerView(name="main", limits=limits)
    return PodView(ref=PodRef(name="p"), annotations=annotations or {}, containers=(c,)), c


def test_sgpu_requests_read_hami_units(metax: Any) -> None:
    handle = metax()
    assert handle.spec.resource_names.all() == (
        "metax-tech.com/sgpu",
        "metax-tech.com/vmemory",
        "metax-tech.com/vcore",
    )
    pod, c = _pod(**{"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None and request.memory_mib == 4096 and request.compute_percent == 100
    pod, c = _pod(**{"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "1536Mi",
                     "metax-tech.com/vcore": "20"})  # fmt: skip
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None and request.memory_mib == 1536 and request.compute_percent == 20


def test_whole_gpu_mode_names_and_requests(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, handle_for: Any
) -> None:
    config = tmp_path / "metax.yaml"
    config.write_text("mode: gpu\n")
    monkeypatch.setenv("XPUSHARE_METAX_CONFIG", str(config))
    handle = handle_for("metax", plugin.metax, {})
    assert handle.spec.resource_names.all() == ("metax-tech.com/gpu",)
    pod, c = _pod(**{"metax-tech.com/gpu": "2"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None and request.count == 2 and request.exclusive


def test_admission_defaults_and_validates_the_qos_policy(metax: Any) -> None:
    handle = metax()
    pod, c = _pod(**{"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "30"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    (patch,) = handle.mutate_admission(pod=pod, container=c, index=0, request=request)
    assert (patch.path, patch.value) == (
        "/metadata/annotations",
        {"metax-tech.com/sgpu-qos-policy": "best-effort"},
    )
    pod, c = _pod({"team": "a"}, **{"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "30"})
    (patch,) = handle.mutate_admission(pod=pod, container=c, index=0, request=request)
    assert patch.path == "/metadata/annotations/metax-tech.com~1sgpu-qos-policy"
    pod, c = _pod({"metax-tech.com/sgpu-qos-policy": "fixed-share"}, **{"metax-tech.com/sgpu": "1"})
    assert handle.mutate_admission(pod=pod, container=c, index=0, request=request) == ()
    pod, c = _pod({"metax-tech.com/sgpu-qos-policy": "greedy"}, **{"metax-tech.com/sgpu": "1"})
    with pytest.raises(AdmissionDenied, match="greedy"):
        handle.mutate_admission(pod=pod, container=c, index=0, request=request)

"""The Moore Threads plugin: the real pymtml binding against a fake libmtml compiled from C."""

from __future__ import annotations

import base64
import ctypes
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.errors import VendorUnavailable
from xpushare.models import (
    AllocateRequest,
    ContainerView,
    DeviceSlice,
    FitReason,
    NodeView,
    PodRef,
    PodView,
)
from xpushare.plugins import VendorHandle
from xpushare.plugins.builtin.defaults import hami_leniencies
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduler.config import WebhookConfig
from xpushare.scheduler.webhook import Webhook
from xpushare.scheduling.ledger import UsageLedger
from xpushare.testing.hosts import vendor_host
from xpushare_others.mthreads import plugin
from xpushare_others.mthreads.library import SYMBOLS

GIB = 1024**3
SOURCE = Path(__file__).parent / "fake_mtml" / "fake_mtml.c"


def gpu(index: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "uuid": f"GPU-mt-{index}",
        "name": "MTT_S4000",
        "sbdf": f"0000:{0x40 + index:02x}:00.0",
        "mem_total": 48 * GIB,
        "mem_used": 6 * GIB,
        "ecc_ue": 0,
        "cores": 8192,
        "util": 55,
        "temp": 61,
        "power_mw": 180_000,
    }
    row.update(overrides)
    return row


@pytest.fixture
def table(table_for: Callable[[str], Any]) -> Any:
    t = table_for("FAKE_MTML_TABLE")
    t.write(gpu(0), gpu(1), driver="2.7.1")
    return t


def started(mthreads: Callable[..., VendorHandle], **config: Any) -> VendorHandle:
    handle = mthreads(**config)
    handle.startup()
    return handle


def test_the_fake_exports_what_pymtml_resolves_for_the_plugin(mtml_lib: Path) -> None:
    import pymtml

    resolved = set(
        re.findall(r'_mtmlGetFunctionPointer\("(\w+)"\)', Path(pymtml.__file__).read_text())
    )
    assert set(SYMBOLS) <= resolved  # names the binding really looks up
    fake = ctypes.CDLL(str(mtml_lib))
    for name in SYMBOLS:
        assert hasattr(fake, name), name


def test_detect_through_pymtml(table: Any, mthreads: Any, tmp_path: Path) -> None:
    numa = tmp_path / "sys/bus/pci/devices/0000:41:00.0"
    numa.mkdir(parents=True)
    (numa / "numa_node").write_text("1\n")
    table.write(gpu(0), gpu(1), gpu(2, virt_role=2, uuid="GPU-guest"), driver="2.7.1")
    devices = started(mthreads).detect()
    assert [d.id for d in devices] == ["GPU-mt-0", "GPU-mt-1"]
    first, second = devices
    assert first.model == "MTT_S4000" and first.memory_mib == 48 * 1024
    assert first.compute_units == 8192 and first.share_slots == 16
    assert first.pci_bus_id == "0000:40:00.0" and second.numa_node == 1
    assert first.extra == {"driver_version": "2.7.1"}


def test_device_handles_are_freed_and_shutdown_balances_init(
    table: Any, mthreads: Any, mtml_lib: Path
) -> None:
    fake = ctypes.CDLL(str(mtml_lib))
    handle = started(mthreads)
    handle.monitor(handle.detect())
    assert fake.fake_mtml_live_devices() == 0
    before = fake.fake_mtml_live_libraries()
    handle.shutdown()
    assert fake.fake_mtml_live_libraries() == before - 1


def test_missing_library_and_refused_init(table: Any, mthreads: Any, tmp_path: Path) -> None:
    with pytest.raises(VendorUnavailable) as caught:
        mthreads(library_path=str(tmp_path / "no/libmtml.so.2")).startup()
    assert str(tmp_path / "no/libmtml.so.2") in caught.value.reason
    assert "/usr/lib/x86_64-linux-gnu/libmtml.so.2" not in caught.value.reason  # no roots given
    table.write(gpu(0), init=1)
    with pytest.raises(VendorUnavailable, match="kernel driver is not loaded"):
        mthreads().startup()


def test_a_missing_symbol_fails_detection_with_its_name(
    table: Any, mthreads: Any, compile_fake: Callable[..., Path], tmp_path: Path
) -> None:
    old = compile_fake(SOURCE, tmp_path / "old", "libmtml.so.2", ["FAKE_OMIT_ECC"])
    handle = started(mthreads, library_path=str(old))
    with pytest.raises(Exception, match="Function Not Found"):
        handle.detect()


def test_health_and_monitor(table: Any, mthreads: Any) -> None:
    handle = started(mthreads)
    devices = handle.detect()
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    s = snapshot.devices[0]
    assert (s.memory_used_mib, s.utilization_percent, s.temperature_c, s.power_w) == (
        6144,
        55.0,
        61.0,
        180.0,
    )
    table.write(gpu(0, ecc_ue=1), gpu(1), driver="2.7.1")
    (event,) = handle.check_health(devices, 0.0) or ()
    assert event.device_id == "GPU-mt-0" and not event.healthy


def _alloc(devices: Any, *slices: DeviceSlice) -> AllocateRequest:
    by_id = {d.id: d for d in devices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="p", uid="u1"),
        container="main",
        node="node-a",
        resource_name="mthreads.com/vgpu",
        slices=slices,
        devices=tuple(by_id[s.device_id] for s in slices),
    )


def test_allocate_whole_and_shared(table: Any, mthreads: Any) -> None:
    handle = started(mthreads)
    devices = handle.detect()
    whole = [
        DeviceSlice(device_id=d.id, index=d.index, memory_mib=d.memory_mib, compute_percent=100)
        for d in devices
    ]
    assert handle.allocate(_alloc(devices, *whole)).envs == {"MTHREADS_VISIBLE_DEVICES": "0,1"}
    piece = DeviceSlice(device_id="GPU-mt-1", index=1, memory_mib=8192, compute_percent=25)
    assert handle.allocate(_alloc(devices, piece)).envs == {
        "MTHREADS_VISIBLE_DEVICES": "1",
        "MTHREADS_QOS_MEMORY_LIMIT": str(8 * GIB),
        "MTHREADS_QOS_COMPUTING_POWER_WEIGHT": "4",
    }


def _pod(**limits: str) -> tuple[PodView, ContainerView]:
    c = ContainerView(name="main", limits=limits)
    return PodView(ref=PodRef(name="p"), containers=(c,)), c


def test_requests_in_hami_units(mthreads: Any) -> None:
    handle = mthreads()
    pod, c = _pod(**{"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "16",
                     "mthreads.com/sgpu-core": "4"})  # fmt: skip
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    assert request.memory_mib == 16 * 512 and request.compute_percent == 25
    pod, c = _pod(**{"mthreads.com/vgpu": "1", "mthreads.com/sgpu-core": "1"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None and request.compute_percent == 6  # 16 of them fit on a GPU
    pod, c = _pod(**{"mthreads.com/vgpu": "2", "mthreads.com/sgpu-core": "4"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None and request.exclusive and request.count == 2


def test_invalid_mthreads_requests_are_refused(mthreads: Any) -> None:
    handle = mthreads()
    pod, c = _pod(**{"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "3",
                     "mthreads.com/sgpu-core": "4"})  # fmt: skip
    with pytest.raises(ValueError, match="must be one of 2, 4, 8"):
        handle.resource_request(pod=pod, container=c)
    pod, c = _pod(**{"mthreads.com/vgpu": "1", "mthreads.com/sgpu-core": "0"})
    with pytest.raises(ValueError, match="1 to 16"):
        handle.resource_request(pod=pod, container=c)


@pytest.mark.parametrize("cores", ["17", "20", "150"])
def test_cores_above_a_whole_gpu_are_clamped_to_it_as_hami_does(mthreads: Any, cores: str) -> None:
    # HAMi clamps a core request to the device's total (16 sixteenths): the whole GPU.
    handle = mthreads()
    pod, c = _pod(**{"mthreads.com/vgpu": "1", "mthreads.com/sgpu-core": cores})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None and (request.compute_percent, request.exclusive) == (100, True)
    assert handle.spec.compute_total == 16
    [said] = hami_leniencies(handle.spec, pod, c)
    assert f"mthreads.com/sgpu-core {cores} is above a whole device (16); taken as 16" in said


@pytest.mark.parametrize(
    ("annotation", "value"),
    [("mthreads.ai/use-gpuuuid", "GPU-mt-1"), ("mthreads.ai/nouse-gpuuuid", "GPU-mt-0")],
)
def test_hamis_uuid_annotations_under_mthreads_ai_pin_the_gpu(
    table: Any, mthreads: Any, annotation: str, value: str
) -> None:
    # HAMi reads Moore Threads' UUID choice under mthreads.ai, not the resources' domain.
    handle = started(mthreads)
    view = NodeView(name="n1", devices=tuple(handle.detect()))
    c = ContainerView(
        name="main", limits={"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "8",
                             "mthreads.com/sgpu-core": "4"},
    )  # fmt: skip
    pod = PodView(ref=PodRef(name="p"), containers=(c,), annotations={annotation: value})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    order = [d.id for d in view.devices]
    assert order == ["GPU-mt-0", "GPU-mt-1"]
    result = handle.fit(request=request, node=view, usage={}, device_order=order)
    assert [s.device_id for s in result.devices] == ["GPU-mt-1"]
    assert result.reasons == {FitReason.UUID_MISMATCH: 1}


def test_an_endless_uuid_list_is_refused_naming_the_annotation(mthreads: Any) -> None:
    pod, c = _pod(**{"mthreads.com/vgpu": "1"})
    many = ",".join(f"GPU-{i}" for i in range(300))
    pod = pod.model_copy(update={"annotations": {"mthreads.ai/use-gpuuuid": many}})
    with pytest.raises(ValueError, match=r"mthreads\.ai/use-gpuuuid lists more than 256"):
        mthreads().resource_request(pod=pod, container=c)


def test_sgpu_memory_with_a_unit_names_the_units_it_likely_meant(mthreads: Any) -> None:
    # sgpu-memory counts units of 512 MiB: 8Gi read as bytes is 16 of them.
    pod, c = _pod(**{"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "8Gi",
                     "mthreads.com/sgpu-core": "4"})  # fmt: skip
    with pytest.raises(ValueError, match=r"mthreads\.com/sgpu-memory counts units of 512 MiB") as e:
        mthreads().resource_request(pod=pod, container=c)
    assert "is 16 units (8192 MiB): write mthreads.com/sgpu-memory: 16" in str(e.value)


def test_the_webhook_writes_the_clamped_cores_in_sixteenths_and_warns() -> None:
    # The scheduler's host (no node, no library), as `xpushare scheduler` builds it.
    host = vendor_host("mthreads", plugin.mthreads, {}, node_name=None)
    try:
        hook = Webhook(
            host=host,
            cluster=ClusterState(UsageLedger()),
            config=WebhookConfig(),
            scheduler_name="s",
        )
        limits = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-core": "20"}
        obj = {
            "metadata": {"name": "p", "namespace": "team"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        }
        body = {"uid": "u", "operation": "CREATE", "namespace": "team", "object": obj}
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}
        response = hook.review(review)
    finally:
        host.close()
    answer = response["response"]
    assert answer["allowed"] is True, answer
    assert any("sgpu-core 20 is above a whole device (16)" in w for w in answer["warnings"])
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert {
        "op": "replace",
        "path": "/spec/containers/0/resources/limits/mthreads.com~1sgpu-core",
        "value": "16",
    } in patch

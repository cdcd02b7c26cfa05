"""HAMi's sGPU app class (``metax-tech.com/sgpu-app-class``): request, admission, fit, Allocate.

The fit is asked through the plugin host with usage as the ledger builds it (each classed
slice booked under its class's partition name), so the rule is checked as /filter runs it.
"""

from __future__ import annotations

from typing import Any

import pytest

from xpushare.errors import AdmissionDenied
from xpushare.models import (
    ContainerRequest,
    ContainerView,
    Device,
    DeviceUsage,
    FitReason,
    NodeView,
    PodRef,
    PodView,
)
from xpushare_others.metax.app_class import CLASS_MODES

APP = "metax-tech.com/sgpu-app-class"
ONLINE, OFFLINE = CLASS_MODES["online"], CLASS_MODES["offline"]
NODE = NodeView(
    name="node-a",
    devices=tuple(
        Device(vendor="metax", id=f"GPU-{i}", index=i, model="MXC500", memory_mib=65536)
        for i in range(2)
    ),
)


def _pod(annotations: dict[str, str], **limits: str) -> tuple[PodView, ContainerView]:
    c = ContainerView(name="main", limits=limits)
    return PodView(ref=PodRef(name="p"), annotations=annotations, containers=(c,)), c


def _request(metax: Any, app: str | None, cores: str = "30") -> ContainerRequest:
    pod, c = _pod({APP: app} if app else {}, **{"metax-tech.com/sgpu": "1",
                  "metax-tech.com/vmemory": "8", "metax-tech.com/vcore": cores})  # fmt: skip
    request = metax().resource_request(pod=pod, container=c)
    assert request is not None
    return request


def _used(device: str, *tags: str, slots: int | None = None, compute: int = 0) -> DeviceUsage:
    n = len(tags) if slots is None else slots
    return DeviceUsage(
        device_id=device,
        used_slots=n,
        used_memory_mib=1024 * n,
        used_compute_percent=compute,
        partitions_in_use=tags,
    )


def _fit(metax: Any, request: ContainerRequest, *usage: DeviceUsage, order: Any = ()) -> Any:
    return metax().fit(
        request=request, node=NODE, usage={u.device_id: u for u in usage}, device_order=order
    )


def test_the_class_reaches_the_request_and_a_bad_one_is_refused(metax: Any) -> None:
    assert _request(metax, "online").mode == ONLINE
    assert _request(metax, "offline").mode == OFFLINE
    assert _request(metax, None).mode is None
    pod, c = _pod({APP: "realtime" * 100}, **{"metax-tech.com/sgpu": "1"})
    with pytest.raises(ValueError, match=APP) as refused:
        metax().resource_request(pod=pod, container=c)
    assert len(str(refused.value)) < 200  # the value is quoted back bounded


def test_admission_online_gets_no_qos_default_and_one_sgpu_only(metax: Any) -> None:
    handle = metax()
    for app, patched in (("online", False), ("offline", True)):
        pod, c = _pod({APP: app}, **{"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "30"})
        request = handle.resource_request(pod=pod, container=c)
        patches = handle.mutate_admission(pod=pod, container=c, index=0, request=request)
        assert bool(patches) is patched, app
        if patched:
            assert patches[0].value == "best-effort"
    pod, c = _pod({APP: "offline"}, **{"metax-tech.com/sgpu": "2"})
    request = handle.resource_request(pod=pod, container=c)
    with pytest.raises(AdmissionDenied, match="applies to one sGPU"):
        handle.mutate_admission(pod=pod, container=c, index=0, request=request)


def test_classed_and_unclassed_pods_never_share_a_gpu(metax: Any) -> None:
    # GPU-0 runs a pod without a class; GPU-1 is idle.
    plain = _used("GPU-0", slots=1)
    got = _fit(metax, _request(metax, "offline"), plain)
    assert got.fits and [s.device_id for s in got.devices] == ["GPU-1"]
    assert got.devices[0].partition == OFFLINE
    assert got.reasons[FitReason.MODE_MISMATCH] == 1
    # GPU-0 offline, GPU-1 online: a pod without a class fits neither.
    refused = _fit(metax, _request(metax, None), _used("GPU-0", OFFLINE), _used("GPU-1", ONLINE))
    assert not refused.fits
    assert refused.reasons == {FitReason.MODE_MISMATCH: 2}
    assert APP in refused.explain() and "no app class" in refused.explain()
    # Unclassed on unclassed stays the core's decision, untagged.
    same = _fit(metax, _request(metax, None), plain, order=("GPU-0", "GPU-1"))
    assert same.fits and same.devices[0].partition is None


def test_offline_never_joins_online_but_online_joins_offline(metax: Any) -> None:
    usage = (_used("GPU-0", ONLINE), _used("GPU-1", ONLINE, OFFLINE))
    refused = _fit(metax, _request(metax, "offline"), *usage)
    assert not refused.fits and refused.reasons == {FitReason.MODE_MISMATCH: 2}
    both = _fit(metax, _request(metax, "online"), _used("GPU-0", OFFLINE))
    assert both.fits


def test_online_books_no_compute_and_prefers_gpus_not_running_offline_alone(metax: Any) -> None:
    # GPU-0 (first in the policy's order) runs offline work only, its compute fully booked;
    # GPU-1 runs one online pod. HAMi prefers GPU-1 and ignores booked compute.
    usage = (_used("GPU-0", OFFLINE, OFFLINE, compute=100), _used("GPU-1", ONLINE))
    got = _fit(metax, _request(metax, "online", cores="60"), *usage, order=("GPU-0", "GPU-1"))
    assert got.fits and [(s.device_id, s.compute_percent) for s in got.devices] == [("GPU-1", 0)]
    assert got.devices[0].partition == ONLINE
    # Only the offline-only GPU left: it is taken, compute fully booked or not.
    only = _fit(metax, _request(metax, "online"), usage[0], _used("GPU-1", slots=1))
    assert only.fits and only.devices[0].device_id == "GPU-0"
    # Among GPUs with online pods, fewer online pods first.
    busy = (_used("GPU-0", ONLINE, ONLINE), _used("GPU-1", ONLINE, OFFLINE, OFFLINE))
    got = _fit(metax, _request(metax, "online"), *busy, order=("GPU-0", "GPU-1"))
    assert got.devices[0].device_id == "GPU-1"
    # An offline pod is held back by booked compute as any pod is.
    full = _fit(metax, _request(metax, "offline"), _used("GPU-0", OFFLINE, compute=100),
                _used("GPU-1", ONLINE))  # fmt: skip
    assert not full.fits and full.reasons[FitReason.INSUFFICIENT_COMPUTE] == 1

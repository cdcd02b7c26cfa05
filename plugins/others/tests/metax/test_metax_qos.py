"""HAMi's sGPU QoS policy (``metax-tech.com/sgpu-qos-policy``) in the fit, and the online score.

The fit is asked through the plugin host with usage as the ledger builds it (each slice
booked under its pod's tag), and once through the real placer and ledger, so the rule is
checked as /filter and /bind run it and as a restarted scheduler rebuilds it.
"""

from __future__ import annotations

from typing import Any

import pytest

from xpushare.models import (
    ContainerRequest,
    ContainerView,
    Device,
    DeviceUsage,
    FitReason,
    FitResult,
    NodeView,
    PodRef,
    PodView,
)
from xpushare.placement import Placer
from xpushare.placement.config import PlacementConfig
from xpushare.placement.requests import pod_request
from xpushare.scheduling import UsageLedger
from xpushare.testing.hosts import vendor_host
from xpushare_others.metax import plugin

QOS = "metax-tech.com/sgpu-qos-policy"
APP = "metax-tech.com/sgpu-app-class"
FIXED, BURST = "sgpu-qos=fixed-share", "sgpu-qos=burst-share"
OFFLINE, ONLINE = "sgpu-app-class=offline", "sgpu-app-class=online"
NODE = NodeView(
    name="node-a",
    devices=tuple(
        Device(vendor="metax", id=f"GPU-{i}", index=i, model="MXC500", memory_mib=65536)
        for i in range(2)
    ),
)


def _pod(annotations: dict[str, str], cores: str = "30") -> tuple[PodView, ContainerView]:
    limits = {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "8"}
    if cores:
        limits["metax-tech.com/vcore"] = cores
    c = ContainerView(name="main", limits=limits)
    return PodView(ref=PodRef(name="p"), annotations=annotations, containers=(c,)), c


def _request(metax: Any, qos: str | None, app: str | None = None, cores: str = "30") -> Any:
    annotations = {k: v for k, v in ((QOS, qos), (APP, app)) if v is not None}
    pod, c = _pod(annotations, cores)
    request = metax().resource_request(pod=pod, container=c)
    assert request is not None
    return request


def _used(device: str, *tags: str, slots: int | None = None) -> DeviceUsage:
    n = len(tags) if slots is None else slots
    return DeviceUsage(
        device_id=device,
        used_slots=n,
        used_memory_mib=1024 * n,
        used_compute_percent=10 * n,
        partitions_in_use=tags,
    )


def _fit(metax: Any, request: ContainerRequest, *usage: DeviceUsage) -> FitResult:
    result: FitResult = metax().fit(
        request=request,
        node=NODE,
        usage={u.device_id: u for u in usage},
        device_order=("GPU-0", "GPU-1"),
    )
    return result


def test_the_policy_reaches_the_request_and_a_bad_one_is_refused(metax: Any) -> None:
    assert _request(metax, "best-effort").mode is None  # the default is left unwritten
    assert _request(metax, None).mode is None  # past the webhook without one: best-effort
    assert _request(metax, "fixed-share").mode == FIXED
    assert _request(metax, "burst-share", "offline").mode == f"{OFFLINE},{BURST}"
    assert _request(metax, "fixed-share", "online").mode == ONLINE  # online: no QoS
    with pytest.raises(ValueError, match=QOS) as refused:
        _request(metax, "gold" * 100)
    assert len(str(refused.value)) < 200


def test_a_gpu_takes_a_pod_only_under_the_policy_of_the_pods_on_it(metax: Any) -> None:
    # GPU-0 runs a best-effort pod (booked untagged); GPU-1 is idle.
    got = _fit(metax, _request(metax, "fixed-share"), _used("GPU-0", slots=1))
    assert got.fits and [s.device_id for s in got.devices] == ["GPU-1"]
    assert got.devices[0].partition == FIXED  # booked under its policy
    assert got.reasons[FitReason.MODE_MISMATCH] == 1
    # Both GPUs busy under other policies: refused, the policy named.
    refused = _fit(metax, _request(metax, "fixed-share"), _used("GPU-0", slots=1),
                   _used("GPU-1", BURST))  # fmt: skip
    assert not refused.fits and refused.reasons == {FitReason.MODE_MISMATCH: 2}
    assert QOS in refused.explain() and "(fixed-share)" in refused.explain()
    # The same policy shares a GPU; best-effort joins best-effort with the core's fit alone.
    same = _fit(metax, _request(metax, "burst-share"), _used("GPU-0", BURST), _used("GPU-1", FIXED))
    assert same.fits and [s.device_id for s in same.devices] == ["GPU-0"]
    plain = _fit(metax, _request(metax, None), _used("GPU-0", slots=1), _used("GPU-1", FIXED))
    assert plain.fits and plain.devices[0].device_id == "GPU-0"
    assert plain.devices[0].partition is None


def test_a_gpu_with_pods_of_two_policies_takes_neither(metax: Any) -> None:
    mixed = _used("GPU-0", FIXED, slots=2)  # one fixed-share slice and one best-effort
    for qos in ("fixed-share", "best-effort"):
        got = _fit(metax, _request(metax, qos), mixed, _used("GPU-1", BURST))
        assert not got.fits and got.reasons == {FitReason.MODE_MISMATCH: 2}, qos


def test_offline_pods_keep_their_policy_and_old_class_tags_read_as_best_effort(metax: Any) -> None:
    # "sgpu-app-class=offline" alone: booked before the QoS was recorded, best-effort.
    old = _used("GPU-0", OFFLINE)
    burst = _fit(metax, _request(metax, "burst-share", "offline"), old, _used("GPU-1", ONLINE))
    assert not burst.fits
    best = _fit(metax, _request(metax, "best-effort", "offline"), old, _used("GPU-1", ONLINE))
    assert best.fits and best.devices[0].partition == OFFLINE
    both = _fit(
        metax, _request(metax, "burst-share", "offline"), _used("GPU-0", f"{OFFLINE},{BURST}")
    )
    assert both.fits and both.devices[0].device_id == "GPU-0"
    assert both.devices[0].partition == f"{OFFLINE},{BURST}"


def test_online_and_whole_compute_requests_are_not_held_by_the_policy(metax: Any) -> None:
    # Online: HAMi checks no QoS; it joins an offline fixed-share GPU.
    online = _fit(metax, _request(metax, None, "online"), _used("GPU-0", f"{OFFLINE},{FIXED}"),
                  _used("GPU-1", f"{OFFLINE},{FIXED}"))  # fmt: skip
    assert online.fits and online.devices[0].partition == ONLINE
    # All the compute (HAMi's exclusive cores: 100): the QoS is not what refuses it.
    whole = _fit(metax, _request(metax, "best-effort", cores="100"), _used("GPU-0", FIXED),
                 _used("GPU-1", FIXED))  # fmt: skip
    assert not whole.fits and FitReason.MODE_MISMATCH not in whole.reasons
    assert whole.reasons[FitReason.EXCLUSIVE_CONFLICT] == 2


def test_the_ledger_keeps_each_pods_policy_for_the_next_fit() -> None:
    host = vendor_host("metax", plugin.metax, {}, node_name=None)
    try:
        ledger = UsageLedger()
        ledger.set_node(NODE.name, NODE.devices)
        placer = Placer(ledger, "binpack", host=host)

        def place(name: str, qos: str) -> str:
            pod, _ = _pod({QOS: qos})
            request = pod_request(pod.model_copy(update={"ref": PodRef(name=name)}),
                                  host.vendors.values())  # fmt: skip
            assignment = placer.decide(request, NODE.name)
            ledger.add(f"default/{name}", assignment)
            return assignment.containers[0].devices[0].device_id

        first = place("a", "fixed-share")
        assert place("b", "burst-share") != first  # binpack would have packed them
        assert place("c", "fixed-share") == first
        # A restarted scheduler rebuilds the usage from the assignments: the same answer.
        rebuilt = UsageLedger()
        rebuilt.set_node(NODE.name, NODE.devices)
        for entry in ledger.entries():
            rebuilt.add(entry.key, entry.assignment)
        again = Placer(rebuilt, "binpack", host=host)
        pod, _ = _pod({QOS: "burst-share"})
        got = again.decide(pod_request(pod, host.vendors.values()), NODE.name)
        assert got.containers[0].devices[0].device_id != first
    finally:
        host.close()


def test_the_online_score_follows_hamis_points(metax: Any) -> None:
    handle = metax()
    online = _request(metax, None, "online")

    def score(*usage: DeviceUsage, request: ContainerRequest = online) -> float | None:
        fits = FitResult(fits=True)
        value: float | None = handle.score(
            request=request, node=NODE, fit=fits, usage={u.device_id: u for u in usage}
        )
        return value

    idle = score()
    beside_online = score(_used("GPU-0", ONLINE), _used("GPU-1", ONLINE, ONLINE))
    beside_offline = score(_used("GPU-0", OFFLINE), _used("GPU-1", OFFLINE, OFFLINE))
    mixed = score(_used("GPU-0", ONLINE, OFFLINE), _used("GPU-1", OFFLINE, OFFLINE))
    assert idle == 1.0
    assert beside_online == pytest.approx(100 / 120)  # -20: one online pod
    assert beside_offline == pytest.approx(100 / 200)  # -100: one offline pod alone
    assert mixed == pytest.approx(100 / 122)  # -20 - 2: the GPU with an online pod is taken
    assert idle > beside_online > mixed > beside_offline
    assert score(request=_request(metax, "fixed-share")) is None  # HAMi's score is 0 there


def test_the_online_score_ranks_nodes_through_the_placer() -> None:
    host = vendor_host("metax", plugin.metax, {}, node_name=None)
    try:
        ledger = UsageLedger()
        for name in ("busy", "calm"):
            ledger.set_node(
                name, [d.model_copy(update={"id": f"{name}-{d.id}"}) for d in NODE.devices[:1]]
            )
        placer = Placer(
            ledger, "binpack", host=host, config=PlacementConfig(vendor_score_weight=1.0)
        )

        def add(name: str, node: str, app: str) -> None:
            pod, _ = _pod({APP: app})
            pod = pod.model_copy(update={"ref": PodRef(name=name)})
            ledger.add(
                f"default/{name}", placer.decide(pod_request(pod, host.vendors.values()), node)
            )

        add("off", "busy", "offline")  # offline work alone on busy's GPU
        add("on", "calm", "online")
        pod, _ = _pod({APP: "online"})
        decision = placer.place(pod_request(pod, host.vendors.values()))
        assert decision is not None and decision.node == "calm"
    finally:
        host.close()

"""/bind under faults a single replica meets: callers without a UID, handoffs with times
that cannot be trusted, Bindings without an answer (issue 13, 5 and 7)."""

from __future__ import annotations

import time

from sched_helpers import DevicePlugin, add_nodes, bind_args, create_pod, gpu_pod

from xpushare.codec import FENCED_KEY, HANDOFF_KEY, TERM_KEY, Handoff, encode_handoff
from xpushare.models import PodRef
from xpushare.testing.handoffs import handoff_annotations, set_handoff


def used_memory(sched, node="node-0"):
    state = sched.scheduler.ledger.node(node)
    return sum(d.used_memory for t in state.tables.values() for d in t.devices)


async def test_a_bind_without_pod_uid_counts_the_pod_once_and_frees_it(api, sched, http):
    add_nodes(api, 1)
    p = create_pod(api, gpu_pod("p", gpu="1", mem="30000"))
    await sched.settle(api)
    args = {**bind_args(p, "node-0"), "PodUID": ""}
    with DevicePlugin(api):
        assert (await sched.post(http, "bind", args)) == {"Error": ""}
        await sched.settle(api)
    # One identity per pod: the reservation and the watched pod are the same entry.
    assert used_memory(sched) == 30000
    assert [e.key for e in sched.scheduler.ledger.entries()] == [p["metadata"]["uid"]]
    api.delete("pods", "p", "default")
    await sched.settle(api)
    assert used_memory(sched) == 0
    assert list(sched.scheduler.ledger.entries()) == []


def _put_handoff(api, node, pod, *, since, expires, term=None):
    value = encode_handoff(
        Handoff(pod=pod, vendors=("mock",), since=since, expires=expires, term=term or 0),
        node=node,
    )

    annotations = {HANDOFF_KEY: value}
    if term is not None:
        annotations[TERM_KEY] = str(term)
    set_handoff(api, node, annotations)


async def test_a_handoff_started_in_the_future_does_not_block_the_node(api, sched, http):
    add_nodes(api, 1)
    ghost = create_pod(api, gpu_pod("ghost", gpu="1"))
    now = time.time()
    # A writer whose clock runs a day ahead, for a pod that was never bound.
    ref = PodRef(namespace="default", name="ghost", uid=ghost["metadata"]["uid"])
    _put_handoff(api, "node-0", ref, since=now + 86400, expires=now + 86420)
    p = create_pod(api, gpu_pod("p", gpu="1"))
    await sched.settle(api)
    with DevicePlugin(api):
        assert (await sched.post(http, "bind", bind_args(p, "node-0"))) == {"Error": ""}
    # The leftover was fenced before it was cleared: a Binding of it cannot land now.
    assert FENCED_KEY in api.get("pods", "ghost")["metadata"]["annotations"]


async def test_a_handoff_that_expires_in_a_year_lasts_the_configured_lifetime(
    api, scheduler_factory, http
):
    sched = await scheduler_factory(**{"bind.handoff_ttl_s": 1.0, "bind.wait_s": 5.0})
    add_nodes(api, 1)
    # A pod bound to the node whose device plugin never allocates it, with an expiry a
    # year ahead: before, every bind onto the node waited for it and failed.
    stuck = gpu_pod("stuck", gpu="1")
    stuck["spec"]["nodeName"] = "node-0"
    stuck = create_pod(api, stuck)
    now = time.time()
    ref = PodRef(namespace="default", name="stuck", uid=stuck["metadata"]["uid"])
    _put_handoff(api, "node-0", ref, since=now, expires=now + 365 * 86400)
    p = create_pod(api, gpu_pod("p", gpu="1"))
    await sched.settle(api)
    started = time.monotonic()
    # No device plugin runs: nobody but the scheduler's own bound on the lifetime clears it.
    assert (await sched.post(http, "bind", bind_args(p, "node-0"))) == {"Error": ""}
    assert time.monotonic() - started < 4.5


async def test_a_binding_without_an_answer_keeps_its_devices_until_the_pod_is_read(
    api, sched, http
):
    add_nodes(api, 1, "1x A100-80GB")
    p = create_pod(api, gpu_pod("p", gpu="1", mem="50000"))
    await sched.settle(api)
    # The Binding is served but its answer is lost (the API server answered 500 after
    # writing it, as a timed-out proxy would): the pod is bound, the caller does not know.
    api.inject("POST", r"/pods/p/binding$", status=0, after=_lose_answer)
    with DevicePlugin(api):
        result = await sched.post(http, "bind", bind_args(p, "node-0"))
        await sched.settle(api)
    # Read back by fencing: the bind is recognised as done and nothing is freed.
    assert result == {"Error": ""}
    assert api.get("pods", "p")["spec"]["nodeName"] == "node-0"
    assert used_memory(sched) == 50000
    q = create_pod(api, gpu_pod("q", gpu="1", mem="50000"))
    await sched.settle(api)
    answer = await sched.post(http, "bind", bind_args(q, "node-0"))
    assert "does not fit" in answer["Error"]


async def _lose_answer(request) -> None:
    from xpushare.testing.apiserver import ApiStatusError

    raise ApiStatusError(500, "InternalError", "the answer was lost")


async def test_a_retried_bind_fences_its_own_pods_handoff_from_an_older_term(
    api, scheduler_factory, http
):
    # This replica's term will be 6; an older term (1) wrote the node and left a handoff of
    # the very pod kube-scheduler now retries here.
    api.put(
        "leases",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "xpushare-scheduler", "namespace": "kube-system"},
            "spec": {"holderIdentity": "", "leaseTransitions": 5},
        },
    )
    add_nodes(api, 1)
    p = create_pod(api, gpu_pod("p", gpu="1", mem="1000"))
    ref = PodRef(namespace="default", name="p", uid=p["metadata"]["uid"])
    now = time.time()
    _put_handoff(api, "node-0", ref, since=now, expires=now + 20, term=1)
    sched = await scheduler_factory(leader=True)
    await sched.settle(api)
    started = time.monotonic()
    assert (await sched.post(http, "bind", bind_args(p, "node-0"))) == {"Error": ""}
    assert time.monotonic() - started < 1.5  # no wait: the handoff is not a bind in flight
    bound = api.get("pods", "p")
    assert bound["spec"]["nodeName"] == "node-0"
    assert bound["metadata"]["annotations"][FENCED_KEY] == "6"
    assert handoff_annotations(api, "node-0")[TERM_KEY] == "6"


async def test_after_the_lease_is_re_created_the_leader_raises_its_term_past_the_nodes(
    api, scheduler_factory, http
):
    # A reinstall: the handoff Leases remember term 9, the new leader Lease counts from 0.
    # The replica campaigns once it has listed them, so its first term is already above.
    add_nodes(api, 1)
    set_handoff(api, "node-0", {TERM_KEY: "9"})
    p = create_pod(api, gpu_pod("p", gpu="1", mem="1000"))
    sched = await scheduler_factory(leader=True)
    await sched.settle(api)
    assert (await sched.post(http, "bind", bind_args(p, "node-0"))) == {"Error": ""}
    lease = api.get("leases", "xpushare-scheduler", "kube-system")
    assert lease["spec"]["leaseTransitions"] == 10
    assert handoff_annotations(api, "node-0")[TERM_KEY] == "10"

"""/bind: one pod write with the assignment, the node handoff, and what a failure gives back."""

from __future__ import annotations

import asyncio

from sched_helpers import (
    DevicePlugin,
    add_nodes,
    assignment_of,
    bind_args,
    counts,
    create_pod,
    gpu_pod,
)

from xpushare.codec import HANDOFF_KEY, Handoff, decode_handoff, encode_handoff
from xpushare.models import PodRef
from xpushare.testing.handoffs import handoff_lease, handoff_value, set_handoff


def handoff_on(api, node):
    raw = handoff_value(api, node)
    return decode_handoff(raw) if raw else None


async def test_bind_writes_handoff_then_one_binding_with_the_assignment(api, sched, http):
    add_nodes(api, 1)
    await sched.settle(api)
    p = create_pod(api, gpu_pod("p", gpu="2", mem="30000", cores="40"))
    first_write = len(api.requests)
    assert (await sched.post(http, "bind", bind_args(p, "node-0"))) == {"Error": ""}
    writes = [r for r in api.requests[first_write:] if r.method != "GET"]
    # The handoff: the node's first, so its Lease is created (owned by the Node, so the
    # garbage collector deletes it with the Node); the Node itself is not written.
    assert writes[0].method == "POST" and writes[0].resource == "leases"
    assert writes[0].path == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    lease = handoff_lease(api, "node-0")
    assert lease["spec"]["holderIdentity"] == "node-0"
    assert lease["metadata"]["labels"] == {"xpushare.io/role": "handoff"}
    (owner,) = lease["metadata"]["ownerReferences"]
    assert owner["kind"] == "Node" and owner["uid"] == api.get("nodes", "node-0")["metadata"]["uid"]
    assert not [w for w in writes if w.resource == "nodes"]
    # The pod: exactly one write, the Binding, carrying the assignment annotation.
    pod_writes = [w for w in writes if w.resource == "pods"]
    assert len(pod_writes) == 1
    assert pod_writes[0].subresource == "binding"
    assert "xpushare.io/assignment" in pod_writes[0].body["metadata"]["annotations"]
    bound = api.get("pods", "p")
    assert bound["spec"]["nodeName"] == "node-0"
    assignment = assignment_of(api, "p")
    assert assignment.node == "node-0"
    devices = assignment.containers[0].devices
    assert len(devices) == 2
    assert {d.memory_mib for d in devices} == {30000}
    assert {d.compute_percent for d in devices} == {40}
    handoff = handoff_on(api, "node-0")
    assert handoff.pod.name == "p" and handoff.vendors == ("mock",)
    assert 0 < handoff.expires - handoff.since <= 60
    await sched.scheduler.events.flush()
    reasons = [w.body["reason"] for w in api.writes("events")]
    assert reasons == ["DevicesAssigned"]
    assert "node-0" in api.writes("events")[0].body["message"]
    # A later handoff on the node is a merge patch of the Lease carrying the version it read.
    api.modify(
        "leases",
        "handoff.node-0",
        lambda o: o["metadata"]["annotations"].pop(HANDOFF_KEY),
        "kube-system",
    )
    q = create_pod(api, gpu_pod("q", gpu="1"))
    await sched.settle(api)
    first_write = len(api.requests)
    assert (await sched.post(http, "bind", bind_args(q, "node-0"))) == {"Error": ""}
    writes = [r for r in api.requests[first_write:] if r.method != "GET"]
    assert writes[0].method == "PATCH" and writes[0].resource == "leases"
    assert writes[0].path.endswith("/namespaces/kube-system/leases/handoff.node-0")
    assert writes[0].content_type.startswith("application/merge-patch+json")
    assert writes[0].body["metadata"]["resourceVersion"]
    assert handoff_on(api, "node-0").pod.name == "q"


async def test_second_bind_waits_for_the_node_and_burst_binds_in_order(api, sched, http):
    add_nodes(api, 1)
    await sched.settle(api)
    pods = [create_pod(api, gpu_pod(f"p{i}", gpu="1")) for i in range(8)]
    await sched.settle(api)
    plugin = DevicePlugin(api)
    with plugin:
        results = await asyncio.gather(
            *(sched.post(http, "bind", bind_args(p, "node-0")) for p in pods)
        )
    await plugin.stop()
    assert results == [{"Error": ""}] * 8
    # One pod at a time was handed to the node, each after the previous one was served:
    # every bind but the last waited for a release, and no pod was handed over twice.
    served = [name for _, name in plugin.served]
    assert len(served) == len(set(served)) >= 7
    used = [assignment_of(api, f"p{i}").containers[0].devices[0].device_id for i in range(8)]
    assert len(set(used)) == 8  # whole devices: 8 distinct ones


async def test_bind_times_out_when_the_handoff_is_never_released(api, scheduler_factory, http):
    sched = await scheduler_factory(**{"bind.wait_s": 0.3, "bind.handoff_ttl_s": 30})
    add_nodes(api, 1)
    await sched.settle(api)
    a = create_pod(api, gpu_pod("a", gpu="1"))
    b = create_pod(api, gpu_pod("b", gpu="1"))
    await sched.settle(api)
    assert (await sched.post(http, "bind", bind_args(a, "node-0"))) == {"Error": ""}
    # Nobody releases a's handoff; a has not started: b must give up, not steal the node.
    result = await sched.post(http, "bind", bind_args(b, "node-0"))
    assert "still handing its devices to pod default/a" in result["Error"]
    assert api.get("pods", "b")["spec"].get("nodeName") is None
    assert handoff_on(api, "node-0").pod.name == "a"
    # b's reservation was given back: the ledger holds a only.
    ledger = sched.scheduler.ledger
    assert [e.key for e in ledger.entries()] == [a["metadata"]["uid"]]


async def test_expired_handoff_is_replaced_at_bind(api, scheduler_factory, http):
    sched = await scheduler_factory(**{"bind.repair_interval_s": 60})
    add_nodes(api, 1)
    stale = Handoff(
        pod=PodRef(namespace="default", name="ghost", uid="u-ghost"),
        vendors=("mock",),
        since=1.0,
        expires=2.0,
    )
    set_handoff(api, "node-0", {HANDOFF_KEY: encode_handoff(stale)})
    p = create_pod(api, gpu_pod("p", gpu="1"))
    await sched.settle(api)
    first = len(api.requests)
    assert (await sched.post(http, "bind", bind_args(p, "node-0"))) == {"Error": ""}
    assert handoff_on(api, "node-0").pod.name == "p"
    # Replaced in the bind's own write, not cleared first; the ghost pod was fenced (a
    # 404: gone), and the repair is counted.
    leases = [r for r in api.requests[first:] if r.resource == "leases" and r.method != "GET"]
    assert len(leases) == 1
    repairs = counts(sched.scheduler.metrics.handoff_repairs, "cause")
    assert repairs and set(repairs) <= {"pod-gone", "expired"}


async def test_orphaned_handoffs_are_repaired_without_a_bind(api, sched, http):
    add_nodes(api, 3)
    live = create_pod(api, gpu_pod("live", gpu="1"))
    await sched.settle(api)
    assert (await sched.post(http, "bind", bind_args(live, "node-2"))) == {"Error": ""}

    def put(node, handoff):
        set_handoff(api, node, {HANDOFF_KEY: handoff})

    now = __import__("time").time()
    gone = Handoff.begin(PodRef(name="deleted-pod", uid="u1"), ["mock"], now=now, ttl_s=60)
    put("node-0", encode_handoff(gone))
    put("node-1", "{not json")
    await api.wait_for(
        lambda: handoff_on(api, "node-0") is None and handoff_value(api, "node-1") is None
    )
    # The live handoff (pod bound, not yet allocated) is kept.
    assert handoff_on(api, "node-2").pod.name == "live"
    repairs = sched.scheduler.metrics.handoff_repairs

    def causes() -> set[str]:
        return {s.labels["cause"] for m in repairs.collect() for s in m.samples if s.value}

    # Counted once the scheduler has the API server's answer to the clearing patch, which
    # may be a moment after the server (this test) sees the annotation gone.
    await api.wait_for(lambda: {"pod-gone", "malformed"} <= causes())
    # Once kubelet admitted the pod its handoff has served and is free, and it stays: the
    # next bind there replaces it in its own write, so clearing it would be a write for
    # nothing (DESIGN.md §6).
    writes = len(api.writes("leases"))
    start = "2026-12-06T00:00:00Z"
    api.modify("pods", "live", lambda o: o["status"].__setitem__("startTime", start))
    await asyncio.sleep(3 * sched.scheduler.config.bind.repair_interval_s + 0.1)
    assert handoff_on(api, "node-2").pod.name == "live"
    assert len(api.writes("leases")) == writes
    assert "started" not in causes()


async def test_pod_deleted_while_waiting_releases_everything(api, scheduler_factory, http):
    sched = await scheduler_factory(**{"bind.wait_s": 5})
    add_nodes(api, 1)
    await sched.settle(api)
    a = create_pod(api, gpu_pod("a", gpu="1"))
    b = create_pod(api, gpu_pod("b", gpu="1"))
    await sched.settle(api)
    assert (await sched.post(http, "bind", bind_args(a, "node-0"))) == {"Error": ""}
    waiting = asyncio.ensure_future(sched.post(http, "bind", bind_args(b, "node-0")))
    ledger = sched.scheduler.ledger
    await api.wait_for(lambda: b["metadata"]["uid"] in ledger)
    api.delete("pods", "b")
    result = await asyncio.wait_for(waiting, 5)
    assert "deleted" in result["Error"]
    assert b["metadata"]["uid"] not in ledger
    assert handoff_on(api, "node-0").pod.name == "a"


async def test_bind_that_no_longer_fits_is_refused_and_counts_nothing(api, sched, http):
    add_nodes(api, 1, "1x A100-80GB")
    a = create_pod(api, gpu_pod("a", gpu="1", cores="100"))
    b = create_pod(api, gpu_pod("b", gpu="1", mem="1000"))
    await sched.settle(api)
    assert (await sched.post(http, "bind", bind_args(a, "node-0"))) == {"Error": ""}
    result = await sched.post(http, "bind", bind_args(b, "node-0"))
    assert "does not fit" in result["Error"]
    assert api.get("pods", "b")["spec"].get("nodeName") is None
    assert b["metadata"]["uid"] not in sched.scheduler.ledger


async def test_bind_of_an_unknown_pod_and_a_failed_binding_write(api, sched, http):
    add_nodes(api, 1)
    await sched.settle(api)
    missing = {"PodName": "nope", "PodNamespace": "default", "PodUID": "x", "Node": "node-0"}
    assert "not found" in (await sched.post(http, "bind", missing))["Error"]
    p = create_pod(api, gpu_pod("p", gpu="1"))
    await sched.settle(api)
    api.inject("POST", r"/pods/p/binding$", 500)
    result = await sched.post(http, "bind", bind_args(p, "node-0"))
    assert "500" in result["Error"]
    # The failed bind gave back both the reservation and the handoff.
    assert p["metadata"]["uid"] not in sched.scheduler.ledger
    await api.wait_for(lambda: handoff_on(api, "node-0") is None)

"""A handoff frees its node when kubelet admits its pod, and the next bind replaces it in one
write (DESIGN.md §6): the node agent writes nothing back."""

from __future__ import annotations

import asyncio

from sched_helpers import add_nodes, bind_args, counts, create_pod, gpu_pod

from xpushare.codec import HANDOFF_KEY, Handoff, decode_handoff, encode_handoff
from xpushare.models import PodRef
from xpushare.scheduler import objects as ob
from xpushare.testing.handoffs import handoff_value, set_handoff

#: kubelet's first status write after it admitted a pod (status_manager.go stamps it).
START = "2026-12-06T00:00:00Z"


def handoff_on(api, node):
    raw = handoff_value(api, node)
    return decode_handoff(raw) if raw else None


def admit(api, name: str) -> None:
    api.modify("pods", name, lambda o: o["status"].__setitem__("startTime", START))


def repairs(sched) -> dict[str, float]:
    return counts(sched.scheduler.metrics.handoff_repairs, "cause")


async def two_pods(api, sched, nodes: int) -> tuple[dict, dict]:
    """*nodes* GPU nodes and two one-GPU pods a and b, all seen by the scheduler."""
    add_nodes(api, nodes)
    a = create_pod(api, gpu_pod("a", gpu="1"))
    b = create_pod(api, gpu_pod("b", gpu="1"))
    await sched.settle(api)
    return a, b


async def bound_then_admitted(api, sched, http, pod, node: str) -> None:
    """/bind puts *pod* on *node*, then kubelet admits it and the scheduler sees it."""
    assert (await sched.post(http, "bind", bind_args(pod, node))) == {"Error": ""}
    admit(api, pod["metadata"]["name"])
    await api.wait_for(lambda: sched.scheduler.cluster.pods[pod["metadata"]["uid"]].started)


def test_start_time_alone_says_kubelet_admitted_the_pod():
    # Pending with a startTime: admitted, the image may still be pulling.
    assert ob.started({"status": {"phase": "Pending", "startTime": START}})
    assert ob.started({"status": {"phase": "Running"}})
    assert ob.started({"status": {"phase": "Failed"}})  # refused at admission
    assert not ob.started({"status": {"phase": "Pending"}})
    # A garbled value is no start time.
    assert not ob.started({"status": {"phase": "Pending", "startTime": 7}})
    assert not ob.started({"status": {"phase": "Pending", "startTime": ""}})


async def test_an_admitted_pods_handoff_is_replaced_in_one_write(api, sched, http):
    a, b = await two_pods(api, sched, 1)
    await bound_then_admitted(api, sched, http, a, "node-0")
    first = len(api.requests)
    assert (await sched.post(http, "bind", bind_args(b, "node-0"))) == {"Error": ""}
    writes = [r for r in api.requests[first:] if r.method != "GET"]
    # The Lease once (b's handoff over a's, conditioned on the version that named a), then
    # the Binding: no clearing write before.
    assert [(w.method, w.resource) for w in writes if w.resource != "events"] == [
        ("PATCH", "leases"),
        ("POST", "pods"),
    ]
    assert writes[0].body["metadata"]["resourceVersion"]
    assert handoff_on(api, "node-0").pod.name == "b"
    assert repairs(sched) == {}  # a served handoff is no repair


async def test_a_served_handoff_stays_free_when_its_pod_is_deleted(api, sched, http):
    # A pod admitted, then gone before the node's next bind (a short job): its handoff has
    # served, so the next bind replaces it at once, with no fence of a pod that is gone.
    a, b = await two_pods(api, sched, 1)
    await bound_then_admitted(api, sched, http, a, "node-0")
    api.delete("pods", "a")
    await api.wait_for(lambda: a["metadata"]["uid"] not in sched.scheduler.cluster.pods)
    first = len(api.requests)
    assert (await sched.post(http, "bind", bind_args(b, "node-0"))) == {"Error": ""}
    writes = [r for r in api.requests[first:] if r.method != "GET" and r.resource != "events"]
    assert [(w.method, w.resource, w.subresource) for w in writes] == [
        ("PATCH", "leases", None),
        ("POST", "pods", "binding"),
    ]
    assert handoff_on(api, "node-0").pod.name == "b"
    assert repairs(sched) == {}


async def test_a_bind_waiting_for_the_node_goes_on_when_kubelet_admits_the_pod(
    api, scheduler_factory, http
):
    sched = await scheduler_factory(**{"bind.wait_s": 20})
    a, b = await two_pods(api, sched, 1)
    assert (await sched.post(http, "bind", bind_args(a, "node-0"))) == {"Error": ""}
    waiting = asyncio.ensure_future(sched.post(http, "bind", bind_args(b, "node-0")))
    await asyncio.sleep(0.3)
    # a is bound, not admitted: its Allocate may be running, b must not take the node.
    assert not waiting.done()
    assert handoff_on(api, "node-0").pod.name == "a"
    admit(api, "a")
    assert (await asyncio.wait_for(waiting, 10)) == {"Error": ""}
    assert handoff_on(api, "node-0").pod.name == "b"
    assert api.get("pods", "b")["spec"]["nodeName"] == "node-0"


async def test_a_handoff_of_a_pod_admitted_on_another_node_is_not_free_by_it(api, sched, http):
    # The pod a handoff names was admitted elsewhere: "started" is about this node only, so
    # the handoff is judged (bound elsewhere) and repaired, never taken as served here.
    a, b = await two_pods(api, sched, 2)
    await bound_then_admitted(api, sched, http, a, "node-1")
    handoffs = sched.scheduler.handoffs
    forged = Handoff.begin(
        PodRef(namespace="default", name="a", uid=a["metadata"]["uid"]),
        ["mock"],
        now=__import__("time").time(),
        ttl_s=30,
    )
    set_handoff(api, "node-0", {HANDOFF_KEY: encode_handoff(forged)})
    await api.wait_for(lambda: (r := handoffs.book.get("node-0")) is not None and r.handoff)
    record = handoffs.book.get("node-0")
    assert record is not None and record.handoff is not None
    assert not handoffs._admitted("node-0", record.handoff)
    assert (await sched.post(http, "bind", bind_args(b, "node-0"))) == {"Error": ""}
    assert handoff_on(api, "node-0").pod.name == "b"
    assert repairs(sched).get("bound-elsewhere") == 1


async def test_the_web_view_tells_a_served_handoff_from_one_in_flight(api, sched, http):
    from xpushare.scheduler.web.details import node_detail

    add_nodes(api, 1)
    a = create_pod(api, gpu_pod("a", gpu="1"))
    await sched.settle(api)
    assert (await sched.post(http, "bind", bind_args(a, "node-0"))) == {"Error": ""}
    scheduler = sched.scheduler

    def shown() -> dict:
        state = scheduler.ledger.nodes["node-0"]
        detail = node_detail(state, scheduler.ledger, scheduler.cluster, scheduler.placer.policy)
        return detail["handoff"]

    await api.wait_for(lambda: shown() is not None)
    assert shown() == {"pod": "default/a", "vendors": ["mock"], "served": False}
    admit(api, "a")
    await api.wait_for(lambda: shown()["served"])

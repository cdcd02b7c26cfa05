"""The ledger follows the API server's truth, never a stale or forged view (issue 31).

Each test reproduces one path by which one GPU got booked twice (or freed while in use) and
checks it holds now: a slow relist, an old event, a tenant's edit of the allocation record, a
fencing term repeated by a re-created Lease, a repair as a new term's first write, and a
watch stream cut mid-event or after one. All GPUs here have 81,920 MiB; pods of 50,000 MiB
fit once.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from sched_helpers import (
    DevicePlugin,
    Running,
    bind_args,
    counts,
    create_pod,
    filter_args,
    gpu_node,
    gpu_pod,
    lease,
)

from xpushare.codec import ASSIGNMENT_KEY, HANDOFF_KEY, TERM_KEY, encode_assignment
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduler.versions import ListSnapshot
from xpushare.scheduling import UsageLedger
from xpushare.testing.apiserver import FakeApiServer, RecordedRequest
from xpushare.testing.handoffs import handoff_value, set_handoff
from xpushare.testing.replicas import overcommits
from xpushare.testing.watchproxy import WatchProxy

POD_MIB = "50000"


def used(sched: Running, node: str = "n") -> int:
    state = sched.scheduler.ledger.node(node)
    assert state is not None
    return sum(d.used_memory for t in state.tables.values() for d in t.devices)


def assignment(node: str, memory: int, device: str | None = None) -> str:
    return encode_assignment(
        PodAssignment(
            node=node,
            containers=(
                ContainerAssignment(
                    container="main",
                    vendor="mock",
                    devices=(
                        DeviceSlice(
                            device_id=device or f"MOCK-{node}-0",
                            memory_mib=memory,
                            compute_percent=0,
                        ),
                    ),
                ),
            ),
        )
    )


def bound_pod(name: str, node: str, memory: int) -> dict[str, Any]:
    """A pod as another writer's Binding left it: on *node*, with its assignment."""
    obj = gpu_pod(name, gpu="1", mem=str(memory))
    obj["metadata"]["annotations"][ASSIGNMENT_KEY] = assignment(node, memory)
    obj["spec"]["nodeName"] = node
    return obj


def is_watch(request: RecordedRequest) -> bool:
    return request.query.get("watch") in ("true", "1")


def is_full_list(request: RecordedRequest) -> bool:
    return not is_watch(request) and not request.query.get("fieldSelector")


async def until(predicate: Any, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


def _handoff_term(sched: Running, node: str) -> int | None:
    record = sched.scheduler.cluster.handoff_book.get(node)
    return record.term if record is not None else None


def counter(sched: Running, name: str, **labels: str) -> float:
    value = sched.scheduler.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


# -- defect 1: a stale list or an old event frees a real booking ------------------------------


async def test_a_slow_relist_keeps_a_pod_bound_while_its_answer_was_on_the_way(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession
) -> None:
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    a = create_pod(api, gpu_pod("a", gpu="1", mem=POD_MIB))
    b = create_pod(api, gpu_pod("b", gpu="1", mem=POD_MIB))
    sched = await scheduler_factory()
    await sched.settle(api)
    listed, answer, resume_watch = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def hold_watch(request: RecordedRequest) -> None:
        await resume_watch.wait()

    async def hold_answer(request: RecordedRequest) -> None:
        # The list is read (its snapshot taken); its answer arrives seconds later, and the
        # watch that follows it lags too, so the stale list is all the scheduler has.
        api.inject("GET", r"^/api/v1/pods$", status=0, before=hold_watch, match=is_watch)
        listed.set()
        await answer.wait()

    api.inject("GET", r"^/api/v1/pods$", status=0, after=hold_answer, match=is_full_list)
    api.put("configmaps", {"metadata": {"name": "churn", "namespace": "default"}})
    api.compact()  # history up to a version newer than the pod watch's
    api.close_watches()  # the watch resumes, gets 410 Gone, relists
    try:
        await until(listed.is_set)
        with DevicePlugin(api):
            assert await sched.post(http, "bind", bind_args(a, "n")) == {"Error": ""}
            await until(lambda: handoff_value(api, "n") is None)
        relists = sched.scheduler.informers[1].relists
        answer.set()
        await until(lambda: sched.scheduler.informers[1].relists > relists)
        assert used(sched) == 50_000, "the relist older than a's Binding freed a's devices"
        verdict = await sched.post(http, "filter", filter_args(b, ["n"]))
        assert verdict["NodeNames"] == []
        answer_b = await sched.post(http, "bind", bind_args(b, "n"))
        assert "does not fit" in answer_b["Error"]
    finally:
        answer.set()
        resume_watch.set()
    assert overcommits(api) == []


async def test_a_pods_own_older_event_does_not_free_its_booking(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession
) -> None:
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    a = create_pod(api, gpu_pod("a", gpu="1", mem=POD_MIB))
    pending = copy.deepcopy(a)  # its ADDED event, as a lagging watch delivers it late
    sched = await scheduler_factory()
    await sched.settle(api)
    with DevicePlugin(api):
        assert await sched.post(http, "bind", bind_args(a, "n")) == {"Error": ""}
    sched.scheduler.cluster.apply_pod(pending)
    assert used(sched) == 50_000
    await sched.settle(api)
    sched.scheduler.cluster.apply_pod(pending)
    assert used(sched) == 50_000


def test_events_and_lists_older_than_what_is_held_change_nothing() -> None:
    ledger = UsageLedger()
    state = ClusterState(ledger)
    state.apply_node(gpu_node("n", "1x A100-80GB") | {})
    a = bound_pod("a", "n", 50_000)
    a["metadata"].update(uid="uid-a", resourceVersion="20")
    pending = copy.deepcopy(a)
    pending["metadata"]["resourceVersion"] = "10"
    del pending["spec"]["nodeName"]
    # A takeover read (or a fence's answer) showed a bound at version 20 ...
    state.apply_pod(a)
    assert ledger.entry("uid-a") is not None
    # ... then the watch delivers its older events, and a list from before the Binding.
    state.apply_pod(pending)
    state.replace_pods([pending], ListSnapshot(version=15, started=0.0))
    state.replace_pods([], ListSnapshot(version=15, started=0.0))
    assert ledger.entry("uid-a") is not None
    # A list newer than what is held, without the pod: it is gone.
    state.replace_pods([], ListSnapshot(version=25, started=0.0))
    assert ledger.entry("uid-a") is None
    # An event from before its deletion does not bring it back.
    state.apply_pod(a)
    assert ledger.entry("uid-a") is None


def test_a_deleted_pods_late_event_does_not_bring_it_back() -> None:
    ledger = UsageLedger()
    state = ClusterState(ledger)
    state.apply_node(gpu_node("n", "1x A100-80GB"))
    a = bound_pod("a", "n", 50_000)
    a["metadata"].update(uid="uid-a", resourceVersion="20")
    state.apply_pod(a)
    gone = copy.deepcopy(a)
    gone["metadata"]["resourceVersion"] = "30"
    state.delete_pod(gone)
    state.apply_pod(a)
    assert ledger.entry("uid-a") is None
    assert len(ledger) == 0


def test_a_relist_keeps_an_assumed_binding_until_a_list_requested_after_it() -> None:
    now = [100.0]
    ledger = UsageLedger()
    state = ClusterState(ledger, monotonic=lambda: now[0])
    state.apply_node(gpu_node("n", "1x A100-80GB"))
    from xpushare.codec import decode_assignment

    ledger.reserve("uid-a", decode_assignment(assignment("n", 50_000)), namespace="default")
    ledger.confirm("uid-a")
    state.assume("uid-a")  # our Binding was answered at t=100; no event shows it yet
    state.replace_pods([], ListSnapshot(version=7, started=99.0))
    assert ledger.entry("uid-a") is not None  # requested before the Binding: cannot know it
    state.replace_pods([], ListSnapshot(version=8, started=101.0))
    assert ledger.entry("uid-a") is None  # requested after it and without it: deleted


# -- defect 2: a pod's owner edits the allocation record --------------------------------------


@pytest.mark.parametrize("edit", ["removed", "changed"])
async def test_a_tenants_edit_of_a_bound_pods_assignment_is_ignored_and_counted(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession, edit: str
) -> None:
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    a = create_pod(api, gpu_pod("a", gpu="1", mem=POD_MIB))
    b = create_pod(api, gpu_pod("b", gpu="1", mem=POD_MIB))
    sched = await scheduler_factory()
    await sched.settle(api)
    with DevicePlugin(api):
        assert await sched.post(http, "bind", bind_args(a, "n")) == {"Error": ""}
    await sched.settle(api)

    def tamper(obj: dict[str, Any]) -> None:
        annotations = obj["metadata"]["annotations"]
        if edit == "removed":
            del annotations[ASSIGNMENT_KEY]
        else:
            annotations[ASSIGNMENT_KEY] = assignment("n", 1)

    api.modify("pods", "a", tamper)
    await sched.settle(api)
    assert used(sched) == 50_000
    assert "does not fit" in (await sched.post(http, "bind", bind_args(b, "n")))["Error"]
    assert counter(sched, "xpushare_scheduler_assignment_tampering_total", edit=edit) == 1
    await sched.scheduler.events.flush()
    reasons = [r.body.get("reason") for r in api.writes("events") if isinstance(r.body, dict)]
    assert "AllocationEditIgnored" in reasons


async def test_an_assignment_added_to_a_pod_bound_without_one_is_ignored(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession
) -> None:
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    plain = gpu_pod("plain", gpu="0")
    plain["spec"]["nodeName"] = "n"  # bound by the default scheduler
    api.put("pods", plain)
    b = create_pod(api, gpu_pod("b", gpu="1", mem=POD_MIB))
    sched = await scheduler_factory()
    await sched.settle(api)
    api.modify(
        "pods",
        "plain",
        lambda o: o["metadata"]["annotations"].update({ASSIGNMENT_KEY: assignment("n", 163_840)}),
    )
    await sched.settle(api)
    assert used(sched) == 0
    with DevicePlugin(api):
        assert await sched.post(http, "bind", bind_args(b, "n")) == {"Error": ""}
    assert counter(sched, "xpushare_scheduler_assignment_tampering_total", edit="added") == 1


# -- defect 3: fencing terms and the takeover read --------------------------------------------


@pytest.fixture
async def proxy(api: FakeApiServer) -> AsyncIterator[WatchProxy]:
    async with WatchProxy("127.0.0.1", api.port) as p:
        yield p


async def test_a_node_of_our_term_number_written_by_another_replica_fences_us(
    api: FakeApiServer,
    scheduler_factory: Any,
    http: aiohttp.ClientSession,
    proxy: WatchProxy,
) -> None:
    """A re-created Lease gave another replica our term number: it bound a pod on the node
    (its Binding landed, its handoff is done) while our pod watch lags. Equal terms used to
    skip the takeover read and double-book."""
    api.put("leases", lease(5, "kube-system"))
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    set_handoff(api, "n", {TERM_KEY: "1"})
    b = create_pod(api, gpu_pod("b", gpu="1", mem=POD_MIB))
    sched = await scheduler_factory(leader=True, server=proxy.url)
    await until(lambda: sched.scheduler.is_leader())
    term = sched.scheduler.leader.term
    assert term is not None
    proxy.hold("pods")
    api.put("pods", bound_pod("a", "n", 50_000))  # the other replica's Binding
    set_handoff(api, "n", {TERM_KEY: str(term)})
    await until(lambda: _handoff_term(sched, "n") == term)
    try:
        with DevicePlugin(api):
            first = await sched.post(http, "bind", bind_args(b, "n"))
            assert "same term number" in first["Error"]
            assert sched.scheduler.leader.term == term + 1
            second = await sched.post(http, "bind", bind_args(b, "n"))
        assert "does not fit" in second["Error"] or "taken meanwhile" in second["Error"]
    finally:
        proxy.release("pods")
    assert overcommits(api) == []


async def test_a_repair_as_a_terms_first_write_is_followed_by_the_pod_read(
    api: FakeApiServer,
    scheduler_factory: Any,
    http: aiohttp.ClientSession,
    proxy: WatchProxy,
) -> None:
    """The new leader's first write on a node clears a finished handoff; its first bind
    there must still read the node's pods (its watch has not shown the old term's pod)."""
    api.put("leases", lease(5, "kube-system"))
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    set_handoff(api, "n", {TERM_KEY: "1"})
    b = create_pod(api, gpu_pod("b", gpu="1", mem=POD_MIB))
    sched = await scheduler_factory(leader=True, server=proxy.url)
    await until(lambda: sched.scheduler.is_leader())
    proxy.hold("pods")
    a = api.put("pods", bound_pod("a", "n", 50_000))  # term 1's Binding, unseen here
    from xpushare.codec import Handoff, encode_handoff
    from xpushare.models import PodRef

    done = Handoff.begin(
        PodRef(namespace="default", name="a", uid=a["metadata"]["uid"]),
        ("mock",),
        now=0.0,
        ttl_s=20,
        term=1,
    )
    done = done.model_copy(update={"allocated": ("mock",)})
    set_handoff(api, "n", {HANDOFF_KEY: encode_handoff(done)})
    # The repair loop clears it: the first write of this term on the node.
    await until(lambda: handoff_value(api, "n") is None)
    try:
        with DevicePlugin(api):
            answer = await sched.post(http, "bind", bind_args(b, "n"))
        assert answer["Error"], "b was bound onto the GPU a holds"
    finally:
        proxy.release("pods")
    assert overcommits(api) == []
    # The held watch never passed the write: the pods were read from the API server.
    assert takeovers(sched) == {"list": 1.0}


def takeovers(sched: Any) -> dict[str, float]:
    return counts(sched.scheduler.metrics.takeover_reads, "source")


async def test_a_takeover_counts_from_the_pod_watch_once_it_has_passed_the_write(
    api: FakeApiServer,
    scheduler_factory: Any,
    http: aiohttp.ClientSession,
    proxy: WatchProxy,
) -> None:
    """The new leader decides on a node before its pod watch shows an older term's Binding
    there; once the watch passes this term's handoff write it has shown that Binding (its
    revision is lower), so the bind is refused without a list of the node's pods."""
    api.put("leases", lease(5, "kube-system"))
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    set_handoff(api, "n", {TERM_KEY: "1"})
    b = create_pod(api, gpu_pod("b", gpu="1", mem=POD_MIB))
    create_pod(api, gpu_pod("c", gpu="1", mem=POD_MIB))
    sched = await scheduler_factory(leader=True, server=proxy.url)
    await until(lambda: sched.scheduler.is_leader())
    proxy.hold("pods")
    api.put("pods", bound_pod("a", "n", 50_000))  # term 1's Binding, unseen here yet
    lists_before = _pod_lists(api)

    async def busy_cluster() -> None:
        # Once this term has written the handoff, another pod changes (a busy cluster's
        # events) and the held stream flows again: a's event, then c's, past the write.
        await until(lambda: handoff_value(api, "n") is not None)
        api.modify("pods", "c", lambda o: o["metadata"].setdefault("labels", {}).update(x="1"))
        proxy.release("pods")

    try:
        with DevicePlugin(api):
            answer, _ = await asyncio.gather(
                sched.post(http, "bind", bind_args(b, "n")), busy_cluster()
            )
    finally:
        proxy.release("pods")
    assert answer["Error"], "b was bound onto the GPU a holds"
    assert overcommits(api) == []
    assert takeovers(sched) == {"watch": 1.0}
    assert _pod_lists(api) == lists_before


def _pod_lists(api: FakeApiServer) -> int:
    return sum(1 for r in api.requests if r.method == "GET" and "fieldSelector" in r.query)


# -- defect 4: a broken watch stream ----------------------------------------------------------


@pytest.mark.parametrize("mid_event", [True, False], ids=["cut-mid-event", "cut-after-event"])
async def test_a_cut_watch_stream_is_restarted_and_nothing_is_missed(
    api: FakeApiServer,
    scheduler_factory: Any,
    http: aiohttp.ClientSession,
    proxy: WatchProxy,
    mid_event: bool,
) -> None:
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    api.put("pods", bound_pod("a", "n", 50_000))
    api.put("pods", bound_pod("c", "n", 10_000))
    sched = await scheduler_factory(server=proxy.url)
    await until(lambda: used(sched) == 60_000)
    # One event through the watch first, so the cut falls on an established stream (the
    # fake sends a watch's headers with its first event).
    api.modify("pods", "c", lambda o: o["metadata"].setdefault("labels", {}).update(seen="yes"))
    await until(
        lambda: (
            sched.scheduler.informers[1].version
            == api.get("pods", "c")["metadata"]["resourceVersion"]
        )
    )
    watches = proxy.watches.get("pods", 0)
    proxy.cut("pods", mid_event=mid_event)
    api.delete("pods", "a")  # the event that is cut (or the last one before the cut)
    await until(lambda: proxy.cuts.get("pods", 0) == 1)
    api.delete("pods", "c")  # after the cut: only a restarted watch sees it
    await until(lambda: used(sched) == 0)
    assert proxy.watches["pods"] > watches, (proxy.watches, watches)
    assert counter(sched, "xpushare_scheduler_watch_errors_total", resource="pods") >= 1
    async with http.get(f"{sched.url}/readyz") as response:
        assert response.status == 200


async def test_an_event_larger_than_the_clients_line_buffer_does_not_wedge_the_watch(
    api: FakeApiServer, scheduler_factory: Any
) -> None:
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    sched = await scheduler_factory()
    await sched.settle(api)
    big = bound_pod("big", "n", 10_000)
    big["metadata"]["annotations"]["tenant.example/notes"] = "x" * 1_000_000
    api.put("pods", big)
    api.put("pods", bound_pod("after", "n", 20_000))
    await until(lambda: used(sched) == 30_000)


async def test_readiness_turns_false_while_a_watch_cannot_be_re_established(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession
) -> None:
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    sched = await scheduler_factory(**{"kube.watch_stale_s": 0.3})
    await sched.settle(api)
    api.inject("GET", r"^/api/v1/pods$", status=503, times=1_000_000)
    api.close_watches()

    async def ready() -> int:
        async with http.get(f"{sched.url}/readyz") as response:
            await response.read()
            return response.status

    async with asyncio.timeout(10):
        while await ready() == 200:
            await asyncio.sleep(0.05)
    async with http.get(f"{sched.url}/readyz") as response:
        assert "pods" in await response.text()
    api.clear_injections()
    async with asyncio.timeout(30):
        while await ready() != 200:
            await asyncio.sleep(0.05)

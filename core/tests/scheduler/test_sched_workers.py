"""Filter workers (scheduler/workers.py): real worker processes beside a real scheduler.

The worker answers /filter and /prioritize from its own watches; what these tests pin is that
it counts the leader's reservations the moment the leader makes them (the handoff write is
held back at the fake API server, so no watch event can have told it), drops them when the
leader does, gets them all again when it is restarted, and is restarted when killed or stalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

import aiohttp
import orjson
import pytest
from sched_helpers import (
    Running,
    add_nodes,
    bind_args,
    create_pod,
    filter_args,
    gpu_pod,
    mock_host,
)

from xpushare.codec import (
    ASSIGNMENT_KEY,
    HANDOFF_LEASE_LABEL,
    HANDOFF_LEASE_ROLE,
    encode_assignment,
)
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.scheduler import workers as workers_module
from xpushare.scheduler.workers import ReservationMirror
from xpushare.scheduling import UsageLedger
from xpushare.testing.apiserver import FakeApiServer, RecordedRequest
from xpushare.testing.handoffs import handoff_lease, handoff_value

#: The binds a test holds at the API server must outlast a worker's restart (imports and a
#: first list: over 20 s on a loaded 2-core machine), so no timeout ends them first.
WORKER = {
    "server.filter_workers": 1,
    "server.filter_port": 0,
    "bind.wait_s": 60,
    "kube.request_timeout_s": 120,
}


async def _ready(running: Running, timeout_s: float = 60.0) -> str:
    """The workers' URL once the leader says they are ready."""
    deadline = time.monotonic() + timeout_s
    while not running.scheduler.ready:
        assert time.monotonic() < deadline, running.scheduler.workers.describe()  # type: ignore[union-attr]
        await asyncio.sleep(0.05)
    return f"http://127.0.0.1:{running.scheduler.ports['filter']}"


async def _filter(http: aiohttp.ClientSession, url: str, obj: Any, names: list[str]) -> Any:
    async with http.post(f"{url}/filter", json=filter_args(obj, names)) as response:
        assert response.status == 200, await response.text()
        answer = await response.json()
        assert not answer["Error"], answer
        return answer


async def _until_fits(
    http: aiohttp.ClientSession, url: str, obj: Any, names: list[str], wanted: set[str]
) -> None:
    deadline = time.monotonic() + 30
    while True:
        answer = await _filter(http, url, obj, names)
        if set(answer["NodeNames"]) == wanted:
            return
        assert time.monotonic() < deadline, answer
        await asyncio.sleep(0.05)


def _creates_handoff_lease(request: RecordedRequest) -> bool:
    body = request.body if isinstance(request.body, dict) else {}
    labels = (body.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(HANDOFF_LEASE_LABEL) == HANDOFF_LEASE_ROLE)


def _gate(api: FakeApiServer) -> asyncio.Event:
    """Hold every handoff write until the returned event is set: the creation of a node's
    handoff Lease (its first bind) and every patch of one."""
    gate = asyncio.Event()

    async def wait(request: RecordedRequest) -> None:
        await gate.wait()

    api.inject(
        "POST", r"/leases$", status=0, times=10**6, before=wait, match=_creates_handoff_lease
    )
    api.inject("PATCH", r"/leases/handoff\.[^/]+$", status=0, times=10**6, before=wait)
    return gate


async def test_worker_counts_a_reservation_before_any_api_write(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession
) -> None:
    names = add_nodes(api, 2, "1x A100-80GB")
    first = create_pod(api, gpu_pod("first", gpu="1", mem="50000"))
    second = create_pod(api, gpu_pod("second", gpu="1", mem="50000"))
    running = await scheduler_factory(**WORKER, **{"kube.server": api.url})
    url = await _ready(running)
    await _until_fits(http, url, second, names, set(names))
    gate = _gate(api)
    bind = asyncio.create_task(running.post(http, "bind", bind_args(first, "node-0")))
    # The leader has decided and reserved; its handoff write waits at the API server, so
    # the worker can know of it only through the leader's stream.
    await _until_fits(http, url, second, names, {"node-1"})
    assert api.get("pods", "first", "default")["spec"].get("nodeName") is None
    assert handoff_lease(api, "node-0") is None  # its creation is the write held
    gate.set()
    assert (await bind)["Error"] == ""
    # Bound: the pod's watch event replaces the mirrored reservation; still one slice.
    await running.settle(api)
    await _until_fits(http, url, second, names, {"node-1"})
    api.delete("pods", "first", "default")
    await _until_fits(http, url, second, names, set(names))


async def test_with_workers_a_bind_reads_its_pod_from_the_watch_not_the_api(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession
) -> None:
    """/filter runs in the worker, so the leader never sees kube-scheduler's copy of the pod;
    it keeps the pods waiting for it from its own watch instead of a GET at every /bind."""
    add_nodes(api, 1, "1x A100-80GB")
    ours = gpu_pod("ours", gpu="1", mem="1000")
    ours["spec"]["schedulerName"] = "xpushare-scheduler"
    other = gpu_pod("other", gpu="1", mem="1000")  # another scheduler's: not kept
    running = await scheduler_factory(**WORKER, **{"kube.server": api.url})
    await _ready(running)
    ours, other = create_pod(api, ours), create_pod(api, other)
    await running.settle(api)
    for obj in (ours, other):
        assert (await running.post(http, "bind", bind_args(obj, "node-0")))["Error"] == ""
    gets = [r.path for r in api.requests if r.method == "GET" and "/pods/" in r.path]
    assert gets == ["/api/v1/namespaces/default/pods/other"]


async def test_worker_drops_what_the_leader_released(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession
) -> None:
    names = add_nodes(api, 2, "1x A100-80GB")
    first = create_pod(api, gpu_pod("first", gpu="1", mem="50000"))
    second = create_pod(api, gpu_pod("second", gpu="1", mem="50000"))
    running = await scheduler_factory(**WORKER, **{"kube.server": api.url})
    url = await _ready(running)
    gate = _gate(api)
    api.inject("POST", r"/binding$", status=500, times=1)
    bind = asyncio.create_task(running.post(http, "bind", bind_args(first, "node-0")))
    await _until_fits(http, url, second, names, {"node-1"})
    gate.set()
    assert "binding" in (await bind)["Error"]
    # The Binding failed, the leader released the reservation, and told the worker.
    await _until_fits(http, url, second, names, set(names))
    assert not list(running.scheduler.ledger.entries())
    assert handoff_value(api, "node-0") is None  # its handoff taken back too


async def test_a_killed_worker_is_started_again_with_the_reservations_in_force(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession
) -> None:
    names = add_nodes(api, 2, "1x A100-80GB")
    first = create_pod(api, gpu_pod("first", gpu="1", mem="50000"))
    second = create_pod(api, gpu_pod("second", gpu="1", mem="50000"))
    running = await scheduler_factory(**WORKER, **{"kube.server": api.url})
    url = await _ready(running)
    pool = running.scheduler.workers
    assert pool is not None
    (pid,) = pool.pids()
    gate = _gate(api)
    bind = asyncio.create_task(running.post(http, "bind", bind_args(first, "node-0")))
    await _until_fits(http, url, second, names, {"node-1"})
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while pool.pids() == [pid] or not pool.synced:
        assert time.monotonic() < deadline, pool.describe()
        await asyncio.sleep(0.05)
    assert running.scheduler.metrics.filter_worker_restarts._value.get() == 1
    # The new worker never saw the reservation happen: it came in the snapshot.
    await _until_fits(http, url, second, names, {"node-1"})
    gate.set()
    assert (await bind)["Error"] == ""


async def test_a_stalled_worker_is_killed_and_started_again(
    api: FakeApiServer,
    scheduler_factory: Any,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_nodes(api, 1, "1x A100-80GB")
    running = await scheduler_factory(**WORKER, **{"kube.server": api.url})
    await _ready(running)
    pool = running.scheduler.workers
    assert pool is not None
    (pid,) = pool.pids()
    monkeypatch.setattr(workers_module, "MIRROR_BUFFER_LIMIT", 64 * 1024)
    os.kill(pid, signal.SIGSTOP)
    try:
        line_entry = running.scheduler.ledger.reserve(
            "default/stream/u1", _assignment("node-0"), cpu_milli=0, memory_mib=0
        )
        # Reservations the stopped worker never reads: the socket fills, then the buffer.
        deadline = time.monotonic() + 30
        while pool.pids() == [pid] and time.monotonic() < deadline:
            for _ in range(200):
                pool._mirror("default/stream/u1", line_entry)
            await asyncio.sleep(0.01)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert running.scheduler.metrics.filter_worker_restarts._value.get() >= 1
    deadline = time.monotonic() + 60
    while pool.pids() == [pid] or not pool.synced:
        assert time.monotonic() < deadline, pool.describe()
        await asyncio.sleep(0.05)


async def test_worker_port_serves_filter_and_prioritize_only(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession
) -> None:
    add_nodes(api, 1, "1x A100-80GB")
    obj = create_pod(api, gpu_pod("p", gpu="1", mem="1000"))
    running = await scheduler_factory(**WORKER, **{"kube.server": api.url})
    url = await _ready(running)
    async with http.post(f"{url}/bind", json=bind_args(obj, "node-0")) as response:
        assert response.status == 404
    async with http.post(f"{url}/mutate", json={}) as response:
        assert response.status == 404
    async with http.post(f"{url}/prioritize", json=filter_args(obj, ["node-0"])) as response:
        assert response.status == 200
        # One candidate: its score is the lowest, 0, and an answer leaves 0 out.
        assert await response.json() == []
    # The leader's own port still answers every verb.
    assert (await running.post(http, "filter", filter_args(obj, ["node-0"])))["NodeNames"] == [
        "node-0"
    ]


async def test_leader_is_unready_until_its_workers_have_listed(
    api: FakeApiServer, scheduler_factory: Any, http: aiohttp.ClientSession
) -> None:
    add_nodes(api, 1)
    running = await scheduler_factory(**WORKER, **{"kube.server": api.url})
    pool = running.scheduler.workers
    assert pool is not None
    await _ready(running)
    async with http.get(f"{running.url}/readyz") as response:
        assert response.status == 200
    # A worker that has not said "synced" (as after a restart) keeps the leader unready.
    pool._workers[0].synced = False
    assert not running.scheduler.ready
    async with http.get(f"{running.url}/readyz") as response:
        assert response.status == 503
        assert await response.text() == "0 of 1 filter workers ready"


# -- the worker's side of the stream, in process ----------------------------------------------


def _assignment(node: str, memory: int = 50_000) -> PodAssignment:
    device = DeviceSlice(device_id=f"MOCK-{node}-0", memory_mib=memory, compute_percent=0)
    return PodAssignment(
        node=node,
        containers=(ContainerAssignment(container="main", vendor="mock", devices=(device,)),),
    )


def _reserve_line(key: str, node: str = "node-0") -> bytes:
    return orjson.dumps(
        {
            "op": "reserve",
            "key": key,
            "assignment": encode_assignment(_assignment(node)),
            "cpu_milli": 0,
            "memory_mib": 0,
            "namespace": "team",
        }
    )


def test_mirror_reserves_releases_and_ages_out() -> None:
    ledger = UsageLedger()
    mirror = ReservationMirror(ledger, ttl_s=10)
    mirror.apply(_reserve_line("a"), now=0)
    mirror.apply(_reserve_line("b"), now=0)
    assert ledger.entry("a") is not None and ledger.entry("a").reserved  # type: ignore[union-attr]
    # Counted against the namespace's quota in the worker as in the leader.
    assert ledger.namespace_usage("team")["mock"][0] == 100_000
    mirror.apply(b'{"op": "release", "key": "a"}', now=1)
    assert ledger.entry("a") is None
    # "b" was never released nor bound (its pod's delete came before the message): it ages
    # out instead of holding the slice for good.
    assert mirror.sweep(now=5) == 0 and ledger.entry("b") is not None
    assert mirror.sweep(now=11) == 1 and ledger.entry("b") is None
    assert len(mirror) == 0


def test_mirror_never_replaces_a_pod_the_watch_counts_as_bound() -> None:
    ledger = UsageLedger()
    mirror = ReservationMirror(ledger, ttl_s=10)
    ledger.add("a", _assignment("node-0", memory=1_000))
    mirror.apply(_reserve_line("a"), now=0)
    entry = ledger.entry("a")
    assert entry is not None and not entry.reserved
    assert entry.charges[0].memory == 1_000
    # A reservation the watch later replaces is forgotten, not released, at the sweep.
    mirror.apply(_reserve_line("c"), now=0)
    ledger.add("c", _assignment("node-0"))
    assert mirror.sweep(now=100) == 0 and ledger.entry("c") is not None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"[]", "JSON object"),
        (b'{"op": "reserve"}', "pod key"),
        (b'{"op": "reserve", "key": "' + b"k" * 2000 + b'"}', "pod key"),
        (b'{"op": "explode", "key": "a"}', "unknown"),
        (b'{"op": "reserve", "key": "a", "assignment": 1}', "must be a string"),
        (
            b'{"op": "reserve", "key": "a", "assignment": "{}", "cpu_milli": -1, "memory_mib": 0}',
            "integers",
        ),
    ],
)
def test_mirror_refuses_malformed_lines(line: bytes, message: str) -> None:
    ledger = UsageLedger()
    with pytest.raises(ValueError, match=message):
        ReservationMirror(ledger).apply(line)
    assert len(ledger) == 0


def _bound_pod(key: str, value: str, node: str = "node-0") -> dict[str, Any]:
    return {
        "metadata": {
            "name": key,
            "namespace": "team",
            "uid": key,
            "annotations": {ASSIGNMENT_KEY: value},
        },
        "spec": {"nodeName": node, "containers": [{"name": "main"}]},
        "status": {"phase": "Pending"},
    }


def test_a_mirrored_reservation_seen_bound_keeps_its_booking_and_the_node_state() -> None:
    """The pod's watch event of a reservation the worker mirrored: the same slices, so the
    booking is confirmed in place. Taking it off and putting it back would change the
    node's state twice and make every verdict about the node be worked out again."""
    from xpushare.scheduler.cluster import ClusterState

    ledger = UsageLedger()
    ledger.set_node("node-0", ())
    cluster = ClusterState(ledger)
    mirror = ReservationMirror(ledger, ttl_s=10)
    line = _reserve_line("a")
    mirror.apply(line, now=0)
    state = ledger.node("node-0")
    assert state is not None
    version = state.version
    booked = ledger.entry("a")
    assert booked is not None and booked.reserved
    value = orjson.loads(line)["assignment"]
    cluster.apply_pod(_bound_pod("a", value))
    entry = ledger.entry("a")
    assert entry is booked and not entry.reserved
    assert state.version == version
    assert ledger.namespace_usage("team")["mock"][0] == 50_000
    # Bound with other slices than the mirror said: the watch's are counted instead.
    mirror.apply(_reserve_line("b"), now=0)
    version = state.version
    other = encode_assignment(_assignment("node-0", memory=20_000))
    cluster.apply_pod(_bound_pod("b", other))
    replaced = ledger.entry("b")
    assert replaced is not None and not replaced.reserved
    assert replaced.charges[0].memory == 20_000 and state.version > version
    assert ledger.namespace_usage("team")["mock"][0] == 70_000


async def test_a_worker_neither_watches_nor_decodes_handoffs(api: FakeApiServer) -> None:
    """A filter worker never binds, so it never waits on a handoff: it has no informer of
    the handoff Leases (built as filter_worker.serve builds it), where the leader has one."""
    from xpushare.scheduler import Scheduler, load_config
    from xpushare.scheduler.kube import Kube, KubeSettings

    config = load_config(environ={}, overrides={"server.filter_workers": 1})
    kube = await Kube.connect(KubeSettings(server=api.url))
    try:
        for worker in (False, True):
            scheduler = Scheduler(
                config, host=mock_host(), kube=kube, freeze_gc=False, worker=worker
            )
            resources = [informer.resource for informer in scheduler.informers]
            assert {"nodes", "pods"} <= set(resources)
            assert ("handoffs" in resources) is not worker, (worker, resources)
            assert scheduler.cluster.handoff_book.decode is not worker
    finally:
        await kube.close()


def test_a_book_that_does_not_decode_keeps_handoffs_raw_and_reports_none() -> None:
    """The worker's book (``handoffs=False``), were it ever given a handoff Lease, keeps the
    value without decoding it, and a garbled one is not its to report."""
    from xpushare.codec import HANDOFF_KEY, Handoff, encode_handoff, handoff_lease_name
    from xpushare.models import PodRef
    from xpushare.scheduler.cluster import ClusterState

    value = encode_handoff(
        Handoff.begin(PodRef(namespace="team", name="p", uid="u"), ["mock"], now=10, ttl_s=30)
    )
    reports: list[str] = []
    for handoffs in (True, False):
        cluster = ClusterState(
            UsageLedger(), handoffs=handoffs, report=lambda *args: reports.append(args[2])
        )
        for version, raw in (("1", value), ("2", "{garbled")):
            cluster.handoff_book.apply(
                {
                    "metadata": {
                        "name": handoff_lease_name("n"),
                        "resourceVersion": version,
                        "annotations": {HANDOFF_KEY: raw},
                    },
                    "spec": {"holderIdentity": "n"},
                }
            )
            record = cluster.handoff_book.get("n")
            assert record is not None and record.raw == raw
            if handoffs and raw == value:
                assert record.handoff is not None and record.handoff.pod.name == "p"
            else:
                assert record.handoff is None
            assert (record.error is not None) is (handoffs and raw != value)
    assert reports == [HANDOFF_KEY]  # the leader's garbled value, once; the worker's none

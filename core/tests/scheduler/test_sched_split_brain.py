"""Two real scheduler replicas; the leader frozen (SIGSTOP) at each await point of /bind.

The defect this pins (issue 13, 1): a leader whose loop stalls after deciding loses its
Lease, the new leader binds another pod onto the same device, then the old leader's write
lands. Here the fake API server freezes the leader's process at the moment one of its
/bind requests arrives (``before``: the request is served only after the process is thawed,
so its write lands late) or has been served (``after``: the answer waits in the socket), the
other replica takes over and binds a second pod that fits the GPU only if the first is not
there, then the old leader is thawed. Whatever happens, no device may end up booked past
its capacity in the API server's annotations, and the node must not be left blocked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sched_helpers import gpu_node, gpu_pod, lease

from xpushare.codec import DEFAULT_HANDOFF_NAMESPACE, TERM_KEY
from xpushare.testing.apiserver import FakeApiServer, RecordedRequest
from xpushare.testing.handoffs import set_handoff
from xpushare.testing.replicas import NodeAgents, Replica, overcommits, start_replica, wait_leader

pytestmark = pytest.mark.slow

#: Two pods of 50,000 MiB on one 81,920 MiB GPU: both bound means over-commit.
POD_MIB = "50000"

#: The requests one /bind makes, in order: (name, method, path pattern, extra match).
POINTS: list[tuple[str, str, str, Any]] = [
    ("get-pod", "GET", r"/namespaces/default/pods/a-{i}$", None),
    # A patch of the node's handoff Lease: the fixture created it, as an earlier term did.
    (
        "write-handoff",
        "PATCH",
        rf"^/apis/coordination\.k8s\.io/v1/namespaces/{DEFAULT_HANDOFF_NAMESPACE}"
        r"/leases/handoff\.n-{i}$",
        None,
    ),
    (
        "read-node-pods",
        "GET",
        r"/api/v1/pods$",
        lambda r, i: r.query.get("fieldSelector") == f"spec.nodeName=n-{i}",
    ),
    ("binding", "POST", r"/namespaces/default/pods/a-{i}/binding$", None),
]
CASES = [(name, when) for name, *_ in POINTS for when in ("before", "after")]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[FakeApiServer, list[Replica]]]:
    async with FakeApiServer() as api:
        # Nodes whose handoff an earlier term wrote (as after any change of leader), so that
        # the first bind of each case takes its node over and reads its pods.
        api.put("leases", lease(5, "default"))
        for i in range(len(CASES)):
            api.put("nodes", gpu_node(f"n-{i}", "1x A100-80GB"))
            set_handoff(api, f"n-{i}", {TERM_KEY: "1"})
        replicas = [start_replica(api.url, f"r{k}", tmp_path) for k in (1, 2)]
        try:
            yield api, replicas
        finally:
            for replica in replicas:
                replica.stop()


async def _bind(
    session: aiohttp.ClientSession, replica: Replica, name: str, node: str
) -> dict[str, Any]:
    body = {"PodName": name, "PodNamespace": "default", "PodUID": "", "Node": node}
    async with session.post(
        f"{replica.url}/bind", json=body, timeout=aiohttp.ClientTimeout(total=60)
    ) as response:
        assert response.status == 200, await response.text()
        result: dict[str, Any] = await response.json()
        return result


async def test_a_frozen_leader_never_double_books(
    cluster: tuple[FakeApiServer, list[Replica]],
) -> None:
    api, replicas = cluster
    agents = NodeAgents(api).start()
    outcomes: list[str] = []
    async with aiohttp.ClientSession() as session:
        try:
            for i, (point, when) in enumerate(CASES):
                outcomes.append(await _scenario(api, replicas, session, i, point, when))
        finally:
            await agents.stop()
        await asyncio.sleep(0.5)
    problems = overcommits(api)
    assert problems == [], f"over-commit after {outcomes}: {problems}"
    # Liveness: on every node at least one of the two pods got the GPU.
    for i in range(len(CASES)):
        bound = [
            p for p in (f"a-{i}", f"b-{i}") if (api.get("pods", p) or {})["spec"].get("nodeName")
        ]
        assert bound, f"case {CASES[i]}: neither pod was bound ({outcomes[i]})"


async def _scenario(
    api: FakeApiServer,
    replicas: list[Replica],
    session: aiohttp.ClientSession,
    i: int,
    point: str,
    when: str,
) -> str:
    for name in (f"a-{i}", f"b-{i}"):
        api.put("pods", gpu_pod(name, **{"gpu": "1", "mem": POD_MIB}))
    for _ in range(3):
        outcome = await _try(api, replicas, session, i, point, when)
        if outcome is not None:
            return outcome
    raise AssertionError(f"case {point}/{when}: the leader never reached the point")


async def _try(
    api: FakeApiServer,
    replicas: list[Replica],
    session: aiohttp.ClientSession,
    i: int,
    point: str,
    when: str,
) -> str | None:
    node = f"n-{i}"
    old = await wait_leader(replicas, session)
    new = next(r for r in replicas if r is not old)
    _, method, pattern, extra = next(p for p in POINTS if p[0] == point)
    fired = asyncio.Event()
    resume = asyncio.Event()

    async def before(request: RecordedRequest) -> None:
        old.freeze()
        fired.set()
        await resume.wait()

    async def after(request: RecordedRequest) -> None:
        old.freeze()
        fired.set()

    api.inject(
        method,
        pattern.format(i=i),
        status=0,
        before=before if when == "before" else None,
        after=after if when == "after" else None,
        match=(lambda r: extra(r, i)) if extra else None,
    )
    first = asyncio.create_task(_bind(session, old, f"a-{i}", node))
    waiting = asyncio.create_task(fired.wait())
    await asyncio.wait([first, waiting], timeout=15, return_when=asyncio.FIRST_COMPLETED)
    if not fired.is_set():
        # The replica lost the lease on its own before it reached the point (a loaded
        # machine): disarm and try again with whoever leads now.
        waiting.cancel()
        api.clear_injections()
        await first
        return None
    try:
        await wait_leader([new], session)
        second = await _bind(session, new, f"b-{i}", node)
    finally:
        old.thaw()
        resume.set()
    result = await first
    # The node is not left blocked: a pod bound or refused, the handoff settles.
    return f"{point}/{when}: a={result['Error'] or 'bound'} b={second['Error'] or 'bound'}"


def test_the_harness_counts_an_over_commit() -> None:
    """The safety check itself: two bound 50,000 MiB pods on one GPU are reported."""
    from xpushare.codec import ASSIGNMENT_KEY, encode_assignment
    from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment

    api = FakeApiServer()
    api.put("nodes", gpu_node("n", "1x A100-80GB"))
    device = "MOCK-n-0"
    for name in ("x", "y"):
        assignment = PodAssignment(
            node="n",
            containers=(
                ContainerAssignment(
                    container="main",
                    vendor="mock",
                    devices=(DeviceSlice(device_id=device, memory_mib=50000, compute_percent=0),),
                ),
            ),
        )
        obj = gpu_pod(name, gpu="1", mem=POD_MIB)
        obj["metadata"]["annotations"][ASSIGNMENT_KEY] = encode_assignment(assignment)
        obj["spec"]["nodeName"] = "n"
        api.put("pods", obj)
    problems = overcommits(api)
    assert problems and "100000 of 81920 MiB" in problems[0], problems

"""The scheduler fault soak: replicas frozen and killed at random while clients bind pods.

Why: the fencing argument (docs/scheduler.md, "Why no interleaving can double-book") is
checked point by point by ``test_sched_split_brain.py`` and ``test_sched_ledger_truth.py``;
this checks it at random, with many binds in flight, node agents that allocate late or
never, and one fault at a time among:

* ``sigstop`` / ``sigkill``: the leader stalls long enough to lose its Lease, or dies (a
  replacement process starts);
* ``watch-cut``: a replica's watch of pods or nodes cut mid-event or after an event
  (each replica reaches the API server through a :class:`WatchProxy` of its own);
* ``watch-hold``: the leader's pod watch held back for seconds, then delivered;
* ``slow-relist``: history compacted, every watch closed, and the pod lists that follow
  answered seconds after their snapshot;
* ``lease-delete``: the Lease deleted (a replica re-creates it, counting from 0);
* ``tenant-edit``: a pod's owner removes or rewrites a bound pod's assignment, or adds one to
  a pod bound without it, and puts it back a moment later (the chart's admission policy
  refuses such edits; the ledger must not follow them while they are visible).

At the end, with every process thawed and every edit undone:

* no device is booked past its capacity in the API server's annotations;
* the leader's ledger (its ``/metrics``) equals a recount from those annotations;
* no reservation is left.

``benchmarks/soak_scheduler.py`` runs it from the command line; a short run is in the test
suite. Everything runs on loopback and stops by itself.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from xpushare.codec import (
    ASSIGNMENT_KEY,
    decode_assignment,
    encode_assignment,
    encode_inventory,
    inventory_key,
)
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.plugins.builtin import mock
from xpushare.testing.apiserver import FakeApiServer, RecordedRequest, node, pod
from xpushare.testing.replicas import (
    NodeAgents,
    Replica,
    overcommits,
    rebuilt_ledger,
    start_replica,
    wait_leader,
)
from xpushare.testing.watchproxy import WatchProxy

#: Every kind of fault, and how often each is drawn (SIGKILL's share is ``kill_share``).
FAULTS = (
    "sigstop",
    "watch-cut",
    "watch-hold",
    "slow-relist",
    "lease-delete",
    "tenant-edit",
)
#: A forged assignment "added" by a tenant claims this much of a device (MiB): two GPUs'
#: worth of 81,920 MiB, so counting it would block the node.
FORGED_MIB = 163_840

GPU = "xpushare.io/mock-gpu"
MEM = "xpushare.io/mock-gpumem"


@dataclass
class SoakConfig:
    duration_s: float = 60.0
    nodes: int = 12
    spec: str = "2x A100-80GB"
    clients: int = 4
    #: Seconds between faults (uniform between half and all of it).
    fault_every_s: float = 3.0
    #: Longest SIGSTOP of the leader (long enough to lose the Lease: FAST_LEASE is 3 s).
    max_freeze_s: float = 5.0
    #: Share of faults that are SIGKILL (the rest drawn evenly from ``faults``).
    kill_share: float = 0.2
    #: The other faults drawn (FAULTS; ("sigstop",) is the soak of session 9).
    faults: tuple[str, ...] = FAULTS
    #: Node agents allocate after up to this long; this many nodes never allocate.
    agent_delay_s: float = 0.3
    silent_nodes: int = 2
    seed: int = 1
    log_dir: Path | None = None
    #: Called with a line at each phase (the command line prints them).
    progress: Callable[[str], None] = lambda line: None


@dataclass
class SoakReport:
    binds: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    bound_pods: int = 0
    overcommits: list[str] = field(default_factory=list)
    ledger_mismatches: list[str] = field(default_factory=list)
    reservations_left: float = 0.0
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.overcommits and not self.ledger_mismatches and not self.reservations_left

    def lines(self) -> list[str]:
        return [
            f"elapsed {self.elapsed_s:.1f} s; faults {dict(self.faults)}",
            f"binds {dict(self.binds)}; pods bound at the end {self.bound_pods}",
            f"over-commits {len(self.overcommits)}; ledger mismatches "
            f"{len(self.ledger_mismatches)}; reservations left {self.reservations_left:g}",
            *self.overcommits[:10],
            *self.ledger_mismatches[:10],
        ]


class _Fleet:
    """The replicas, keeping two alive: a killed one is replaced by a new process. Each
    reaches the API server through a watch proxy of its own."""

    def __init__(self, api: FakeApiServer, log_dir: Path) -> None:
        self.api = api
        self.log_dir = log_dir
        self.replicas: list[Replica] = []
        self.proxies: dict[str, WatchProxy] = {}
        self._next = 1

    async def spawn(self) -> Replica:
        identity = f"r{self._next}"
        proxy = await WatchProxy("127.0.0.1", self.api.port).__aenter__()
        self.proxies[identity] = proxy
        replica = start_replica(proxy.url, identity, self.log_dir)
        self._next += 1
        self.replicas.append(replica)
        return replica

    def alive(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive()]

    def release_all(self) -> None:
        for proxy in self.proxies.values():
            for resource in ("pods", "nodes"):
                proxy.release(resource)

    async def stop(self) -> None:
        for replica in self.replicas:
            replica.stop()
        for proxy in self.proxies.values():
            await proxy.close()


async def _leader(fleet: _Fleet, session: aiohttp.ClientSession) -> Replica | None:
    for replica in fleet.alive():
        if await replica.ready(session):
            return replica
    return None


async def _post(
    session: aiohttp.ClientSession, replica: Replica, verb: str, body: Any
) -> tuple[int, Any]:
    try:
        async with session.post(
            f"{replica.url}/{verb}", json=body, timeout=aiohttp.ClientTimeout(total=20)
        ) as response:
            return response.status, await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return 0, {"Error": f"{type(exc).__name__}"}


async def _client(
    k: int,
    api: FakeApiServer,
    fleet: _Fleet,
    session: aiohttp.ClientSession,
    names: list[str],
    until: float,
    rng: random.Random,
    report: SoakReport,
) -> None:
    """Plays kube-scheduler for one stream of pods: filter, then bind to a node that fits."""
    serial = 0
    while time.monotonic() < until:
        serial += 1
        name = f"c{k}-{serial}"
        obj = api.put("pods", pod(name, limits={GPU: "1", MEM: str(rng.randrange(8, 60) * 1000)}))
        for _ in range(4):  # kube-scheduler retries a pod that failed to bind
            leader = await _leader(fleet, session)
            if leader is None:
                await asyncio.sleep(0.2)
                continue
            status, answer = await _post(
                session, leader, "filter", {"Pod": obj, "Nodes": None, "NodeNames": names}
            )
            fits = (answer or {}).get("NodeNames") or [] if status == 200 else []
            if not fits:
                report.binds["no-fit" if status == 200 else f"filter-{status}"] += 1
                break
            target = rng.choice(fits)
            args = {"PodName": name, "PodNamespace": "default", "PodUID": "", "Node": target}
            status, answer = await _post(session, leader, "bind", args)
            error = (answer or {}).get("Error") if isinstance(answer, dict) else "?"
            if status == 200 and not error:
                report.binds["bound"] += 1
                break
            report.binds["failed"] += 1
            await asyncio.sleep(0.1)
        # Churn: now and then a pod that runs ends, so capacity comes back.
        if rng.random() < 0.5:
            done = [
                p
                for p in api.items("pods")
                if p["spec"].get("nodeName") and p["metadata"]["name"].startswith(f"c{k}-")
            ]
            if done:
                victim = rng.choice(done)
                api.delete("pods", victim["metadata"]["name"], "default")
        await asyncio.sleep(rng.uniform(0.0, 0.05))


async def _faults(
    fleet: _Fleet,
    session: aiohttp.ClientSession,
    config: SoakConfig,
    until: float,
    rng: random.Random,
    report: SoakReport,
) -> None:
    while time.monotonic() < until:
        await asyncio.sleep(rng.uniform(config.fault_every_s / 2, config.fault_every_s))
        leader = await _leader(fleet, session)
        if leader is None:
            continue
        if rng.random() < config.kill_share or not config.faults:
            leader.signal(9)
            report.faults["sigkill"] += 1
            await fleet.spawn()
            config.progress(f"SIGKILL {leader.identity}; started r{len(fleet.replicas)}")
            continue
        kind = rng.choice(config.faults)
        report.faults[kind] += 1
        line = await _FAULTS[kind](fleet, leader, config, rng)
        config.progress(f"{kind}: {line}")


async def _sigstop(fleet: _Fleet, leader: Replica, config: SoakConfig, rng: random.Random) -> str:
    leader.freeze()
    pause = rng.uniform(0.1, config.max_freeze_s)
    await asyncio.sleep(pause)
    leader.thaw()
    return f"{leader.identity} for {pause:.1f} s"


async def _watch_cut(fleet: _Fleet, leader: Replica, config: SoakConfig, rng: random.Random) -> str:
    replica = rng.choice(fleet.alive())
    resource = rng.choice(("pods", "nodes"))
    mid = rng.random() < 0.5
    fleet.proxies[replica.identity].cut(resource, mid_event=mid)
    return f"{replica.identity}'s {resource} watch, {'mid-event' if mid else 'after an event'}"


async def _watch_hold(
    fleet: _Fleet, leader: Replica, config: SoakConfig, rng: random.Random
) -> str:
    proxy = fleet.proxies[leader.identity]
    pause = rng.uniform(0.5, 3.0)
    proxy.hold("pods")
    await asyncio.sleep(pause)
    proxy.release("pods")
    return f"{leader.identity}'s pod watch for {pause:.1f} s"


async def _slow_relist(
    fleet: _Fleet, leader: Replica, config: SoakConfig, rng: random.Random
) -> str:
    api = fleet.api
    delay = rng.uniform(1.0, 4.0)

    async def late(request: RecordedRequest) -> None:
        await asyncio.sleep(delay)  # the snapshot is taken; its answer arrives late

    def full_list(request: RecordedRequest) -> bool:
        return request.query.get("watch") not in ("true", "1") and not request.query.get(
            "fieldSelector"
        )

    api.inject("GET", r"^/api/v1/pods$", status=0, after=late, match=full_list, times=2)
    # A change nobody watches moves the history past every watch's version.
    api.put("configmaps", {"metadata": {"name": "soak-churn", "namespace": "default"}})
    api.compact()
    api.close_watches()
    await asyncio.sleep(delay)
    return f"pod lists answered {delay:.1f} s after their snapshot"


async def _lease_delete(
    fleet: _Fleet, leader: Replica, config: SoakConfig, rng: random.Random
) -> str:
    api = fleet.api
    if api.get("leases", "xpushare-scheduler", "default") is not None:
        api.delete("leases", "xpushare-scheduler", "default")
    return f"held by {leader.identity}"


async def _tenant_edit(
    fleet: _Fleet, leader: Replica, config: SoakConfig, rng: random.Random
) -> str:
    """An owner's edit of a bound pod's record, visible for a moment, then undone."""
    api = fleet.api
    pause = rng.uniform(0.3, 2.0)
    bound = [
        p
        for p in api.items("pods")
        if p["spec"].get("nodeName") and ASSIGNMENT_KEY in p["metadata"].get("annotations", {})
    ]
    if not bound or rng.random() < 0.3:
        # Bound without a record (the default scheduler's pod), then a forged one added.
        nodes = sorted({p["spec"].get("nodeName") or "" for p in api.items("pods")} - {""})
        if not nodes:
            return "no node with pods yet"
        target = rng.choice(nodes)
        name = f"forged-{rng.randrange(1 << 30)}"
        plain = pod(name, node_name=target, phase="Running")
        api.put("pods", plain)
        forged = _record(target, f"MOCK-{target}-0", FORGED_MIB)
        api.modify(
            "pods", name, lambda o: o["metadata"]["annotations"].update({ASSIGNMENT_KEY: forged})
        )
        await asyncio.sleep(pause)
        api.delete("pods", name, "default")
        return f"added a {FORGED_MIB} MiB record to {name} on {target} for {pause:.1f} s"
    victim = rng.choice(bound)
    name = victim["metadata"]["name"]
    original = victim["metadata"]["annotations"][ASSIGNMENT_KEY]
    removed = rng.random() < 0.5

    def edit(obj: dict[str, Any]) -> None:
        annotations = obj["metadata"]["annotations"]
        if removed:
            annotations.pop(ASSIGNMENT_KEY, None)
        else:
            first = decode_assignment(original).containers[0].devices[0]
            annotations[ASSIGNMENT_KEY] = _record(victim["spec"]["nodeName"], first.device_id, 1)

    def undo(obj: dict[str, Any]) -> None:
        obj["metadata"]["annotations"][ASSIGNMENT_KEY] = original

    if api.get("pods", name, "default") is None:
        return f"{name} went away first"
    api.modify("pods", name, edit)
    await asyncio.sleep(pause)
    if api.get("pods", name, "default") is not None:
        api.modify("pods", name, undo)
    return f"{'removed' if removed else 'rewrote'} {name}'s record for {pause:.1f} s"


def _record(node_name: str, device: str, memory_mib: int) -> str:
    """An assignment of one mock device slice, as a tenant would write one by hand."""
    slice_ = DeviceSlice(device_id=device, memory_mib=memory_mib, compute_percent=0)
    container = ContainerAssignment(container="main", vendor="mock", devices=(slice_,))
    return encode_assignment(PodAssignment(node=node_name, containers=(container,)))


_FAULTS = {
    "sigstop": _sigstop,
    "watch-cut": _watch_cut,
    "watch-hold": _watch_hold,
    "slow-relist": _slow_relist,
    "lease-delete": _lease_delete,
    "tenant-edit": _tenant_edit,
}


def _metrics_usage(text: str) -> dict[tuple[str, str], float]:
    usage: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "xpushare_scheduler_device_memory_allocated_mib":
            for sample in family.samples:
                usage[(sample.labels["node"], sample.labels["device"])] = sample.value
    return usage


def _reservations(text: str) -> float:
    for family in text_string_to_metric_families(text):
        if family.name == "xpushare_scheduler_reservations":
            return sum(s.value for s in family.samples)
    return 0.0


async def run_soak(config: SoakConfig) -> SoakReport:
    """Run the soak; the report says what was checked and what failed."""
    rng = random.Random(config.seed)
    report = SoakReport()
    started = time.monotonic()
    log_dir = config.log_dir or Path(tempfile.mkdtemp(prefix="xpushare-soak-"))
    async with FakeApiServer() as api:
        names = [f"node-{i}" for i in range(config.nodes)]
        for name in names:
            inventory = encode_inventory("mock", name, mock.parse_spec(config.spec, name))
            api.put("nodes", node(name, {inventory_key("mock"): inventory}))
        agents = NodeAgents(
            api, delay_s=config.agent_delay_s, jitter=True, never=set(names[: config.silent_nodes])
        ).start()
        fleet = _Fleet(api, log_dir)
        await fleet.spawn()
        await fleet.spawn()
        try:
            async with aiohttp.ClientSession() as session:
                await wait_leader(fleet.alive(), session)
                until = time.monotonic() + config.duration_s
                config.progress(f"leader after {time.monotonic() - started:.1f} s")
                await asyncio.gather(
                    _faults(fleet, session, config, until, rng, report),
                    *(
                        _client(k, api, fleet, session, names, until, rng, report)
                        for k in range(config.clients)
                    ),
                )
                for replica in fleet.replicas:
                    replica.thaw()
                fleet.release_all()
                config.progress(f"faults over after {time.monotonic() - started:.1f} s")
                leader = await wait_leader(fleet.alive(), session)
                config.progress(f"leader after {time.monotonic() - started:.1f} s")
                await _settle(api, leader, session, report)
                config.progress(f"settled after {time.monotonic() - started:.1f} s")
        finally:
            await agents.stop()
            await fleet.stop()
        report.bound_pods = sum(1 for p in api.items("pods") if p["spec"].get("nodeName"))
        report.overcommits = overcommits(api)
    report.elapsed_s = time.monotonic() - started
    return report


async def _settle(
    api: FakeApiServer, leader: Replica, session: aiohttp.ClientSession, report: SoakReport
) -> None:
    """Wait (bounded) until the leader's ledger equals the recount and nothing is reserved."""
    deadline = time.monotonic() + 30
    while True:
        async with session.get(f"{leader.url}/metrics") as response:
            text = await response.text()
        ledger = rebuilt_ledger(api)
        expected = {
            (name, d.id): float(d.used_memory)
            for name, state in ledger.nodes.items()
            for table in state.tables.values()
            for d in table.devices
        }
        seen = _metrics_usage(text)
        mismatches = [
            f"{node}/{device}: leader books {seen.get((node, device))} MiB, the annotations {value}"
            for (node, device), value in sorted(expected.items())
            if seen.get((node, device)) != value
        ]
        left = _reservations(text)
        if (not mismatches and not left) or time.monotonic() > deadline:
            report.ledger_mismatches = mismatches
            report.reservations_left = left
            return
        await asyncio.sleep(0.5)

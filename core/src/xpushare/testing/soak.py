"""The scheduler fault soak: replicas frozen and killed at random while clients bind pods.

Why: the fencing argument (docs/scheduler.md, "Why no interleaving can double-book") is
checked point by point by ``test_sched_split_brain.py``; this checks it at random, with many
binds in flight, node agents that allocate late or never, and leaders that stall (SIGSTOP)
or die (SIGKILL, then a replacement process starts). At the end, with every process thawed:

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

from xpushare.codec import encode_inventory, inventory_key
from xpushare.plugins.builtin import mock
from xpushare.testing.apiserver import FakeApiServer, node, pod
from xpushare.testing.replicas import (
    NodeAgents,
    Replica,
    overcommits,
    rebuilt_ledger,
    start_replica,
    wait_leader,
)

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
    #: Share of faults that are SIGKILL (the rest SIGSTOP).
    kill_share: float = 0.3
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
    """The replicas, keeping two alive: a killed one is replaced by a new process."""

    def __init__(self, api: FakeApiServer, log_dir: Path) -> None:
        self.api = api
        self.log_dir = log_dir
        self.replicas: list[Replica] = []
        self._next = 1

    def spawn(self) -> Replica:
        replica = start_replica(self.api.url, f"r{self._next}", self.log_dir)
        self._next += 1
        self.replicas.append(replica)
        return replica

    def alive(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive()]

    def stop(self) -> None:
        for replica in self.replicas:
            replica.stop()


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
        if rng.random() < config.kill_share:
            leader.signal(9)
            report.faults["sigkill"] += 1
            fleet.spawn()
            config.progress(f"SIGKILL {leader.identity}; started r{len(fleet.replicas)}")
        else:
            leader.freeze()
            report.faults["sigstop"] += 1
            pause = rng.uniform(0.1, config.max_freeze_s)
            config.progress(f"SIGSTOP {leader.identity} for {pause:.1f} s")
            await asyncio.sleep(pause)
            leader.thaw()


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
        fleet.spawn()
        fleet.spawn()
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
                config.progress(f"faults over after {time.monotonic() - started:.1f} s")
                leader = await wait_leader(fleet.alive(), session)
                config.progress(f"leader after {time.monotonic() - started:.1f} s")
                await _settle(api, leader, session, report)
                config.progress(f"settled after {time.monotonic() - started:.1f} s")
        finally:
            await agents.stop()
            fleet.stop()
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

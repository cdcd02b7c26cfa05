"""Replaying a workload against a simulated fleet with the real placement engine.

Each arriving task becomes a pod spec, is parsed by the vendor's hook, filtered, scored and
placed by :class:`~xpushare.placement.Placer` and counted in a
:class:`~xpushare.scheduling.UsageLedger`: the calls the extender makes for a pod.
Everything is deterministic for a given seed: the arrival order and the fleet's order, by
which the engine breaks ties (:func:`~xpushare.simulator.fleet.seeded_order`), are drawn
from it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from xpushare.placement import PlacementConfig, Placer
from xpushare.scheduling import UNITS, FragmentationMeter, PodRequest, Workload
from xpushare.scheduling.workload import TaskShape
from xpushare.simulator.fleet import (
    MIG_VENDOR,
    NODE_ORDERS,
    VENDOR,
    MigModels,
    NodeOrder,
    capacity_gpus,
    pod_view,
    populate,
    seeded_order,
)
from xpushare.simulator.migprofiles import GEOMETRIES, profiles
from xpushare.simulator.protocol import DEFAULT_INFLATION, DEFAULT_SEED, arrivals

if TYPE_CHECKING:
    from xpushare.placement.placer import Decision
    from xpushare.plugins import PluginHost
    from xpushare.simulator.trace import NodeSpec, TaskSpec

Progress = Callable[[int, int], None]

#: Answers each node keeps in a replay (``UsageLedger(memo_limit=...)``; the scheduler keeps
#: 32). A replay asks every unchanged node about each task shape of its trace in turn: the
#: openb default trace has 151 distinct tasks, and with 64 answers a node the full replay
#: took 60 % longer. A trace is finite, so this bounds nothing a replay needs: 1,024 answers
#: a node, ~1,200 nodes, some 40 MB at most.
SIMULATION_MEMO_ENTRIES = 1_024


@dataclass
class RunResult:
    """One policy, one seed: what was allocated as demand arrived, and what failed."""

    policy: str
    seed: int
    capacity_gpus: int
    tasks_arrived: int = 0
    tasks_placed: int = 0
    arrived_gpus: float = 0.0
    allocated_gpus: float = 0.0
    failed_gpus: float = 0.0
    fragmentation_gpus: float = 0.0
    free_gpus: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)
    #: (arrived demand, allocated), both in % of capacity, at each whole percent of arrival.
    curve: list[tuple[float, float]] = field(default_factory=list)
    seconds: float = 0.0
    #: CPU time of the replay (this process): on a shared machine, what the replay itself
    #: cost, whatever else ran beside it.
    cpu_seconds: float = 0.0

    @property
    def allocation_ratio(self) -> float:
        """Allocated GPUs in % of the fleet's capacity."""
        return 100.0 * self.allocated_gpus / self.capacity_gpus if self.capacity_gpus else 0.0

    @property
    def arrived_ratio(self) -> float:
        return 100.0 * self.arrived_gpus / self.capacity_gpus if self.capacity_gpus else 0.0

    @property
    def unallocated_gpus(self) -> float:
        return self.capacity_gpus - self.allocated_gpus

    @property
    def fragmentation_ratio(self) -> float:
        """Fragmented GPUs in % of the free GPUs."""
        return 100.0 * self.fragmentation_gpus / self.free_gpus if self.free_gpus else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "seed": self.seed,
            "capacity_gpus": self.capacity_gpus,
            "tasks_arrived": self.tasks_arrived,
            "tasks_placed": self.tasks_placed,
            "arrived_gpus": round(self.arrived_gpus, 3),
            "arrived_percent": round(self.arrived_ratio, 3),
            "allocated_gpus": round(self.allocated_gpus, 3),
            "allocation_percent": round(self.allocation_ratio, 3),
            "unallocated_gpus": round(self.unallocated_gpus, 3),
            "failed_gpus": round(self.failed_gpus, 3),
            "fragmentation_gpus": round(self.fragmentation_gpus, 3),
            "fragmentation_percent_of_free": round(self.fragmentation_ratio, 3),
            "failures": dict(sorted(self.failures.items(), key=lambda kv: -kv[1])),
            "curve": [[round(a, 3), round(b, 3)] for a, b in self.curve],
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
        }


@dataclass(frozen=True, slots=True)
class Placement:
    """One decision of a replay: the task, and its node and device indexes (None: failed)."""

    task: str
    node: str | None
    devices: tuple[int, ...] = ()


def _placement(task: TaskSpec, decision: Decision | None) -> Placement:
    if decision is None:
        return Placement(task.name, None)
    indexes = sorted(s.index for c in decision.assignment.containers for s in c.devices)
    return Placement(task.name, decision.node, tuple(indexes))


class Simulation:
    """A fleet and a workload, ready to be replayed under any policy and seed."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        tasks: Sequence[TaskSpec],
        *,
        host: PluginHost,
        config: PlacementConfig | None = None,
        inflation: float = DEFAULT_INFLATION,
        target: float = 1.0,
        coverage: float = 0.95,
        node_order: NodeOrder = "seeded",
        mig_models: Sequence[str] = (),
    ) -> None:
        if node_order not in NODE_ORDERS:
            raise ValueError(f"node_order must be one of {NODE_ORDERS}, got {node_order!r}")
        if not nodes:
            raise ValueError("the fleet has no nodes")
        if not tasks:
            raise ValueError("the workload has no tasks")
        if not 0 < target <= inflation:
            raise ValueError(f"target must be in (0, inflation={inflation}], got {target}")
        self.nodes = list(nodes)
        self.tasks = list(tasks)
        self.host = host
        self.config = config or PlacementConfig()
        self.inflation = inflation
        self.target = target
        self.node_order = node_order
        self.capacity = capacity_gpus(self.nodes)
        if self.capacity == 0:
            raise ValueError("the fleet has no GPUs")
        self.vendor, self.mig = self._mig_fleet(host, mig_models)
        self.names = host.vendor(self.vendor).spec.resource_names
        self.workload = self._workload(coverage)

    def _mig_fleet(self, host: PluginHost, models: Sequence[str]) -> tuple[str, MigModels | None]:
        """The fleet's vendor and MIG profiles: the mock vendor's GPUs, or for a MIG fleet
        the NVIDIA vendor's, with the GPUs of *models* in dynamic MIG mode."""
        if not models:
            return VENDOR, None
        unknown = [m for m in models if m not in GEOMETRIES]
        if unknown:
            raise ValueError(
                f"no MIG geometry for GPU model(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(GEOMETRIES))}"
            )
        if MIG_VENDOR not in host.vendors:
            raise ValueError(
                f"a MIG fleet needs the {MIG_VENDOR} vendor, whose fit places MIG instances: "
                "pip install 'xpushare[nvidia]'"
            )
        return MIG_VENDOR, {m: profiles(GEOMETRIES[m]) for m in models}

    def _parse(self, placer: Placer, task: TaskSpec) -> PodRequest:
        return placer.request(pod_view(task, self.names))

    def request_parser(self) -> Placer:
        """A placer on an empty ledger, for turning this replay's tasks into requests."""
        return Placer(self.config.new_ledger(), "binpack", host=self.host, config=self.config)

    def _workload(self, coverage: float) -> Workload:
        """The trace's task shapes and frequencies, the FGD paper's "typical pods"."""
        placer = self.request_parser()
        parsed: dict[tuple[Any, ...], TaskShape] = {}
        counts: Counter[TaskShape] = Counter()
        for t in self.tasks:
            key = (t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli, t.gpu_spec)
            shape = parsed.get(key)
            if shape is None:
                shape = TaskShape.of(self._parse(placer, t))
                if t.gpu_spec != t.models:
                    # The authors' typical pods are keyed by the model list as written, so
                    # a list with repeats is a shape of its own (issue 20, gpuspec traces).
                    shape = replace(shape, key=(shape.key, t.gpu_spec))
                parsed[key] = shape
            counts[shape] += 1
        return Workload.from_counts(counts, coverage)

    def fleet(self, seed: int) -> list[NodeSpec]:
        """The nodes in the order a replay of *seed* registers them (ties go to the first)."""
        if self.node_order == "listed":
            return list(self.nodes)
        return seeded_order(self.nodes, seed)

    def run(
        self,
        policy: str,
        seed: int = DEFAULT_SEED,
        progress: Progress | None = None,
        *,
        order: Sequence[TaskSpec] | None = None,
        fleet: Sequence[NodeSpec] | None = None,
        decisions: list[Placement] | None = None,
    ) -> RunResult:
        """Replay the arrivals of *seed* under *policy*.

        *order* and *fleet* replace the arrivals and the fleet's order drawn from the seed
        (to replay a sequence another simulator exported, decision by decision); each
        decision is appended to *decisions* when given.
        """
        started = time.perf_counter()
        cpu_started = time.process_time()
        if order is None:
            order = arrivals(self.tasks, self.capacity, seed=seed, inflation=self.inflation)
        ledger = self.config.new_ledger(memo_limit=SIMULATION_MEMO_ENTRIES)
        populate(ledger, self.fleet(seed) if fleet is None else fleet, self.vendor, self.mig)
        placer = Placer(ledger, policy, host=self.host, config=self.config)
        placer.policy.set_workload(self.workload)
        result = RunResult(policy=policy, seed=seed, capacity_gpus=self.capacity)
        limit = self.target * self.capacity + 1e-9
        failures: Counter[str] = Counter()
        next_point = 0
        total = len(order)
        for i, task in enumerate(order):
            if result.arrived_gpus + task.gpus > limit:
                break
            result.arrived_gpus += task.gpus
            result.tasks_arrived += 1
            request = self._parse(placer, task)
            decision = placer.place(request)
            if decisions is not None:
                decisions.append(_placement(task, decision))
            if decision is not None:
                placer.commit(f"sim/{task.name}", request, decision.assignment)
                result.allocated_gpus += task.gpus
                result.tasks_placed += 1
            else:
                result.failed_gpus += task.gpus
                tally = placer.failure_tally(request)
                reason = tally.most_common(1)[0][0].value if tally else "no node"
                failures[reason] += 1
            arrived = result.arrived_ratio
            if arrived >= next_point:
                result.curve.append((arrived, result.allocation_ratio))
                next_point = int(arrived) + 1
            if progress is not None and (i % 64 == 0):
                progress(i, total)
        if not result.curve or result.curve[-1][0] != result.arrived_ratio:
            result.curve.append((result.arrived_ratio, result.allocation_ratio))
        meter = FragmentationMeter(self.workload)
        frag = 0.0
        free = 0
        for state in ledger.nodes.values():
            frag += meter.node_frag(state)
            free += sum(t.units_free for t in state.tables.values())
        result.fragmentation_gpus = frag / UNITS
        result.free_gpus = free / UNITS
        result.failures = dict(failures)
        result.seconds = time.perf_counter() - started
        result.cpu_seconds = time.process_time() - cpu_started
        if progress is not None:
            progress(total, total)
        return result

"""Decision time of the placement engine: filter + prioritize of one pod over a fleet.

Fleets of 500 and 5,000 nodes with 8 GPUs each, half occupied (every GPU drawn from 0, 25,
50, 75 and 100 % used, mean 50 %, seeded), and the pods the extender would see: a mix of
shares of one GPU and whole 1, 2 and 4-GPU requests. Two regimes, each reported as p50/p99
per decision (filter then prioritize over every node, as kube-scheduler calls the extender):

* ``cold``: every node's remembered answers are dropped before each decision, so every
  node is evaluated from scratch (the worst case: a new pod shape after every node changed);
* ``stream``: pods arrive one after another and each is placed and counted, so only the
  node that changed is re-evaluated (the steady state of a scheduler).

Usage: ``uv run python benchmarks/bench_placement.py [--nodes 500,5000] [--policy fgd]
[--runs 3] [--vendor nvidia]``. Each configuration runs ``--runs`` times on fresh fleets
(different seeds) and each figure is the median over the runs, with its range. Prints
figures; asserts nothing (machines are noisy). ``--vendor nvidia``: the fleet's GPUs are
NVIDIA's and the engine asks the installed xpushare-nvidia plugin (its fit hook).
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import statistics
import time

from xpushare.models import (
    ContainerAssignment,
    ContainerRequest,
    Device,
    DeviceSlice,
    PodAssignment,
)
from xpushare.placement import Placer
from xpushare.scheduling import DEFAULT_POLICY, PodRequest, UsageLedger, Workload

GPUS_PER_NODE = 8
#: Decisions left out of the "after warm-up" p99: the first time a pod shape meets the
#: fleet's states, every state is evaluated (about 40 shapes in the mix below).
WARM_UP = 50
USED_LEVELS = (0, 25, 50, 75, 100)


def _id(vendor: str, name: str, g: int) -> str:
    return f"GPU-{name}-{g}" if vendor == "nvidia" else f"{name}-{g}"


def build_fleet(n_nodes: int, seed: int, vendor: str = "mock") -> UsageLedger:
    rng = random.Random(seed)
    ledger = UsageLedger()
    for i in range(n_nodes):
        name = f"node-{i:05d}"
        devices = [
            Device(vendor=vendor, id=_id(vendor, name, g), index=g, model="A100", memory_mib=40960)
            for g in range(GPUS_PER_NODE)
        ]
        ledger.set_node(name, devices, cpu_milli=128000, memory_mib=1048576)
        containers = []
        for g in range(GPUS_PER_NODE):
            pct = rng.choice(USED_LEVELS)
            if pct:
                s = DeviceSlice(
                    device_id=_id(vendor, name, g),
                    memory_mib=40960 * pct // 100,
                    compute_percent=pct,
                )
                containers.append(
                    ContainerAssignment(container=f"c{g}", vendor=vendor, devices=(s,))
                )
        if containers:
            used = sum(1 for _ in containers)
            ledger.add(
                f"existing/{name}",
                PodAssignment(node=name, containers=tuple(containers)),
                cpu_milli=8000 * used,
                memory_mib=32768 * used,
            )
    return ledger


def pods(n: int, seed: int, vendor: str = "mock") -> list[PodRequest]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.5:
            pct = rng.choice((10, 20, 25, 30, 40, 50, 60, 75))
            req = ContainerRequest(vendor=vendor, memory_percent=pct, compute_percent=pct)
        else:
            count = rng.choice((1, 1, 1, 2, 4))
            req = ContainerRequest(vendor=vendor, count=count, compute_percent=100, exclusive=True)
        out.append(PodRequest.build([req], cpu_milli=rng.choice((2000, 4000, 8000))))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(
    n_nodes: int, policy: str, decisions: int, seed: int, vendor: str = "mock"
) -> dict[str, list[float]]:
    """One fleet, both regimes: the decision times (seconds) of each.

    ``vendor="nvidia"``: the fleet's GPUs are NVIDIA's and the engine asks the installed
    plugin (xpushare-nvidia), whose own fit hook decides where it applies (MIG, NVLink;
    neither here, so the core's fit answers through the plugin's ``xpushare_fit_applies``).
    """
    host = None
    if vendor != "mock":
        from xpushare.plugins import PluginHost

        host = PluginHost.from_environment()
    ledger = build_fleet(n_nodes, seed, vendor)
    # As the scheduler service does after its first sync (scheduler/app.py): the loaded
    # state out of the cyclic garbage collector's reach, whose full passes over the
    # millions of small objects of a 5,000-node ledger otherwise stall a decision for
    # 50-300 ms. The collector's thresholds stay CPython's defaults, as in the service.
    gc.collect()
    gc.freeze()
    names = list(ledger.nodes)
    stream = pods(decisions, seed + 1, vendor)
    out: dict[str, list[float]] = {}
    for regime in ("cold", "stream"):
        placer = Placer(ledger, policy, host=host)
        placer.policy.set_workload(Workload.from_requests(pods(500, seed + 2, vendor)))
        times = []
        placed = 0
        for i, request in enumerate(stream):
            if regime == "cold":
                for state in ledger.nodes.values():
                    state.memo = {}
            start = time.perf_counter()
            result = placer.filter(request, names)
            scores = placer.prioritize(request, result.fits)
            times.append(time.perf_counter() - start)
            if regime == "stream" and scores:
                best = max(scores, key=lambda n: scores[n])
                placer.commit(f"bench/{i}", request, placer.decide(request, best))
                placed += 1
        # Put the fleet back for the next regime.
        for i in range(placed):
            ledger.remove(f"bench/{i}")
        out[regime] = times
    gc.unfreeze()
    return out


def report(n_nodes: int, policy: str, runs: list[dict[str, list[float]]]) -> None:
    """Per regime, each figure's median over the runs (and its range when several)."""
    for regime in ("cold", "stream"):
        figures: dict[str, list[float]] = {"p50": [], "p99": [], "p99w": [], "max": []}
        for times in (r[regime] for r in runs):
            figures["p50"].append(1000 * statistics.median(times))
            figures["p99"].append(1000 * percentile(times, 0.99))
            figures["p99w"].append(1000 * percentile(times[WARM_UP:], 0.99))
            figures["max"].append(1000 * max(times))
        print(
            f"{n_nodes:>6} nodes  {policy:<8} {regime:<6}  p50 {show(figures['p50'])}  "
            f"p99 {show(figures['p99'])}  p99 after {WARM_UP} {show(figures['p99w'])}  "
            f"max {show(figures['max'])}  ({len(runs[0][regime])} decisions x {len(runs)} runs)"
        )


def show(values: list[float]) -> str:
    """The median of *values* (ms), with their range when there are several."""
    mid = statistics.median(values)
    spread = f" [{min(values):.2f}-{max(values):.2f}]" if len(values) > 1 else ""
    return f"{mid:6.2f} ms{spread}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="500,5000")
    parser.add_argument("--policy", default=f"{DEFAULT_POLICY},fgd,binpack")
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="independent runs (fresh fleet and engine) per configuration; each figure is "
        "the median over runs, its range in brackets (shared machines are noisy)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--vendor",
        choices=("mock", "nvidia"),
        default="mock",
        help="the GPUs' vendor: nvidia asks the installed xpushare-nvidia plugin (its fit hook)",
    )
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.processor() or platform.machine()}")
    for n in (int(x) for x in args.nodes.split(",")):
        decisions = args.decisions if n <= 1000 else max(150, args.decisions // 2)
        for policy in dict.fromkeys(args.policy.split(",")):
            runs = [
                run(n, policy, decisions, args.seed + 10 * r, args.vendor) for r in range(args.runs)
            ]
            report(n, policy, runs)


if __name__ == "__main__":
    main()

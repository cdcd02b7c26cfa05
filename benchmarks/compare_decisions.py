"""Replay the FGD authors' simulator's arrival sequence through ours, decision by decision.

Their simulator (hkust-adsl/kubernetes-scheduler-simulator) logs, at INFO, each pod it
tries (``[i] attempt to create pod(ns/name)``) and where it went (``pod(ns/name) is
scheduled to node(name)`` or ``[i] failed to schedule pod(ns/name)``); at DEBUG it also logs
the nodes it creates, with the random prefix that decides its ties
(``attempt to create node(0601-openb-node-0000)``). Given such a log (it may stop early: a
run killed after a few thousand pods is enough) and the node names, this script replays the
same pods, in the same order, on the same node order through our engine, and prints every
decision where ours differs: the first one is where to look.

    uv run python benchmarks/compare_decisions.py --trace default --log run.log \\
        --nodes nodes.txt [--policy fgd] [--show 10]

``nodes.txt``: their node names, one a line (``grep 'attempt to create node'`` of a DEBUG
log). Tuned copies (``name-tuned-N``) are the trace's task ``name``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from xpushare.plugins import PluginHost
from xpushare.simulator import Simulation, read_nodes, read_tasks
from xpushare.simulator.datasets import trace_files
from xpushare.simulator.engine import Placement
from xpushare.simulator.trace import TaskSpec

ATTEMPT = re.compile(r"\[(\d+)\] attempt to create pod\([^/]+/([^)]+)\)")
SCHEDULED = re.compile(r"pod\([^/]+/([^)]+)\) is scheduled to node\(([^)]+)\)")
FAILED = re.compile(r"\[(\d+)\] failed to schedule pod\([^/]+/([^)]+)\)")
TUNED = re.compile(r"-tuned-\d+$")
TYPICAL = re.compile(
    r"\[\d+\] <CPU:\s*([\d.]+), GPU: (\d+) x \{(\d+)\s*\}m \(([^)]*)\)>: (\d+) \(.*cumsum"
)


def their_decisions(log: Path) -> list[tuple[str, str | None]]:
    """(pod, node or None) in arrival order; a last pod with no outcome yet is dropped."""
    out: list[tuple[str, str | None]] = []
    pending: str | None = None
    with log.open(errors="replace") as fh:
        for line in fh:
            if m := ATTEMPT.search(line):
                pending = m.group(2)
            elif (m := SCHEDULED.search(line)) and m.group(1) == pending:
                out.append((pending, m.group(2)))
                pending = None
            elif (m := FAILED.search(line)) and m.group(2) == pending:
                out.append((pending, None))
                pending = None
    return out


def their_typical(log: Path, tasks: list[TaskSpec]) -> list[tuple[TaskSpec, int]]:
    """Their typical pods (logged at INFO before the first pod), as trace tasks and counts.

    The log rounds CPU to 10 millicores; each entry is matched to a task of the trace with
    that rounded CPU, GPU count, share and model list (their list is the raw string)."""
    by_key: dict[tuple[int, int, int, str], TaskSpec] = {}
    for t in tasks:
        by_key.setdefault((round(t.cpu_milli, -1), t.num_gpu, t.gpu_milli, "|".join(t.gpu_spec)), t)
    out = []
    with log.open(errors="replace") as fh:
        for line in fh:
            if "Count top" in line:
                break
            if m := TYPICAL.search(line):
                cpu = round(round(float(m.group(1)) * 1000), -1)
                key = (cpu, int(m.group(2)), int(m.group(3)), m.group(4))
                dedup = "|".join(dict.fromkeys(x for x in key[3].split("|") if x))
                t = by_key.get(key) or by_key[(*key[:3], dedup)]
                out.append((t, int(m.group(5))))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--data-dir", type=Path)
    ap.add_argument("--log", type=Path, required=True, help="their simulator's log")
    ap.add_argument("--nodes", type=Path, required=True, help="their node names, one a line")
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--show", type=int, default=10, help="differing decisions to print")
    ap.add_argument("--limit", type=int, default=0, help="compare at most this many pods")
    ap.add_argument(
        "--their-typical",
        action="store_true",
        help="weigh fragmentation by their typical pods (from the log) instead of ours",
    )
    args = ap.parse_args()

    nodes_file, pods_file = trace_files(args.trace, args.data_dir)
    nodes = {n.name: n for n in read_nodes(nodes_file)}
    tasks = read_tasks(pods_file)
    by_name = {t.name: t for t in tasks}
    prefixed = sorted(line.strip() for line in args.nodes.read_text().splitlines() if line.strip())
    plain = {p: p.split("-", 1)[1] for p in prefixed}
    fleet = [nodes[plain[p]] for p in prefixed]
    theirs = their_decisions(args.log)
    if args.limit:
        theirs = theirs[: args.limit]
    order: list[TaskSpec] = []
    for pod, _ in theirs:
        base = by_name[TUNED.sub("", pod)]
        order.append(base if base.name == pod else TaskSpec(pod, *_fields(base)))

    sim = Simulation(
        list(nodes.values()), tasks, host=PluginHost.from_environment(), inflation=1.3, target=1.3
    )
    if args.their_typical:
        from collections import Counter

        from xpushare.scheduling import Workload
        from xpushare.scheduling.workload import TaskShape
        from xpushare.simulator.fleet import pod_view

        counts: Counter[TaskShape] = Counter()
        placer = sim.request_parser()
        for i, (t, n) in enumerate(their_typical(args.log, tasks)):
            shape = TaskShape.of(placer.request(pod_view(t, sim.names)))
            # Their shapes are keyed by the raw model string: keep theirs apart.
            counts[TaskShape(shape.vendor, (shape.key, i), shape.cpu_milli, 0, shape.demand)] = n
        sim.workload = Workload.from_counts(counts, coverage=1.0)
        print(f"their typical pods: {len(counts)} shapes")
    ours: list[Placement] = []
    sim.run(args.policy, order=order, fleet=fleet, decisions=ours)
    differ = 0
    first = None
    for i, ((pod, node), mine) in enumerate(zip(theirs, ours, strict=False)):
        their_node = plain.get(node) if node else None
        if their_node != mine.node:
            differ += 1
            if first is None:
                first = i
            if differ <= args.show:
                t = order[i]
                print(
                    f"[{i}] {pod} (cpu {t.cpu_milli}, mem {t.memory_mib}, gpu {t.num_gpu}x"
                    f"{t.gpu_milli}{' ' + '|'.join(t.gpu_spec) if t.gpu_spec else ''}):"
                    f" theirs {node}, ours {mine.node} {list(mine.devices)}"
                )
    placed_theirs = sum(1 for _, n in theirs if n)
    placed_ours = sum(1 for p in ours if p.node)
    print(
        f"{len(theirs)} decisions compared; {differ} differ"
        + (f", the first at [{first}]" if first is not None else "")
        + f"; placed: theirs {placed_theirs}, ours {placed_ours}"
    )
    return 0


def _fields(t: TaskSpec) -> tuple[int, int, int, int, tuple[str, ...]]:
    return (t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli, t.gpu_spec)


if __name__ == "__main__":
    sys.exit(main())

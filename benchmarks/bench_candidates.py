"""/filter's feasibility check and the placer's prioritize over 500 candidates, in process.

What the extender's filter worker does for each pod, without HTTP: kube-scheduler's sample
of 500 random nodes out of 5,000 (8 GPUs each, every GPU 0-100 % used, bench_placement's
fleet), the feasibility check (scheduler/feasible.py), then the placer's scores of the nodes
that fit, and the pod placed on the best one so the fleet's states move as they do in a
scheduler. ``--node-by-node`` answers every call with the per-node loop instead of the
candidate rows (scheduler/candidates.py), for an A/B in one sitting. Prints figures; asserts
nothing (machines are noisy).

    uv run python benchmarks/bench_candidates.py
    uv run python benchmarks/bench_candidates.py --node-by-node
"""

from __future__ import annotations

import argparse
import gc
import random
import time

from bench_placement import build_fleet, pods

from xpushare.placement import Placer
from xpushare.scheduler import feasible
from xpushare.scheduler.feasible import FeasibilityChecker
from xpushare.scheduling import Workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--candidates", type=int, default=500)
    parser.add_argument("--decisions", type=int, default=1000, help="measured, after 300 more")
    parser.add_argument("--policy", default="fgd-cpu")
    parser.add_argument("--node-by-node", action="store_true", help="no candidate rows")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.node_by_node:
        feasible.ROWS_FROM = 2**62
    ledger = build_fleet(args.nodes, args.seed)
    gc.collect()
    gc.freeze()  # as the scheduler does after its first sync
    names = list(ledger.nodes)
    placer = Placer(ledger, args.policy)
    placer.policy.set_workload(Workload.from_requests(pods(500, args.seed + 2)))
    checker = FeasibilityChecker(placer)
    rng = random.Random(args.seed + 4)
    stream = pods(300 + args.decisions, args.seed + 1)
    sample = min(args.candidates, len(names))
    check_s = prioritize_s = 0.0
    for i, request in enumerate(stream):
        candidates = rng.sample(names, sample)
        started = time.process_time()
        result = checker.check(request, candidates)
        checked = time.process_time()
        scores = placer.prioritize(request, result.fits)
        done = time.process_time()
        if i >= 300:  # after the warm-up: every pod shape has met the fleet
            check_s += checked - started
            prioritize_s += done - checked
        if scores:
            best = max(scores, key=scores.__getitem__)
            placer.commit(f"bench/{i}", request, placer.decide(request, best))
    path = "node by node" if args.node_by_node else "candidate rows"
    print(
        f"{args.nodes} nodes, {sample} candidates, {args.decisions} decisions, "
        f"{args.policy}, {path}: check {check_s * 1000 / args.decisions:.3f} ms a call, "
        f"prioritize {prioritize_s * 1000 / args.decisions:.3f} ms a call (CPU time)"
    )


if __name__ == "__main__":
    main()

"""The placement engine's answers on bench_placement's streams, for comparing two trees.

A refactoring of the engine must not change one answer. This script replays
bench_placement's fleets and pod streams the way the extender calls the engine (/filter
through the feasibility check, /prioritize of the nodes that fit, /bind's devices on the
best of them, counted in the ledger) and writes one JSON line per call, so two trees'
outputs compare byte for byte:

    uv run python benchmarks/engine_answers.py --out new.jsonl
    (cd ../old-tree && uv run python ../new-tree/benchmarks/engine_answers.py --out old.jsonl)
    cmp old.jsonl new.jsonl

Only the engine's public calls are used, so the script runs against an older tree too.
Also the direct calls (``Placer.filter``, ``Placer.scores``, ``Placer.select``,
``failure_tally``), which the simulator and the CLI make.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from xpushare.placement import Placer
from xpushare.scheduler.feasible import FeasibilityChecker
from xpushare.scheduling import Workload


def _bench() -> Any:
    """bench_placement, beside this file (its fleets and pod streams)."""
    path = Path(__file__).with_name("bench_placement.py")
    spec = importlib.util.spec_from_file_location("bench_placement", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def answers(n_nodes: int, policy: str, decisions: int, seed: int, vendor: str) -> list[str]:
    """One JSON line per pod of the stream: the extender's answers, then the direct calls'."""
    bench = _bench()
    host = None
    if vendor != "mock":
        from xpushare.plugins import PluginHost

        host = PluginHost.from_environment()
    ledger = bench.build_fleet(n_nodes, seed, vendor)
    names = list(ledger.nodes)
    stream = bench.pods(decisions, seed + 1, vendor)
    placer = Placer(ledger, policy, host=host)
    placer.policy.set_workload(Workload.from_requests(bench.pods(500, seed + 2, vendor)))
    checker = FeasibilityChecker(placer)
    lines = []
    for i, request in enumerate(stream):
        feasible = checker.check(request, names, scored=True)
        scores = placer.prioritize_each(request, feasible.fits)
        record: dict[str, Any] = {
            "i": i,
            "fits": feasible.fits,
            "failed": feasible.failed,
            "reasons": {n: str(r) for n, r in feasible.reasons.items()},
            "prioritize": scores,
        }
        if i % 5 == 0:  # the direct calls too, on every fifth pod (they cost a fill each)
            direct = placer.filter(request, names, observe=False)
            record["filter"] = [direct.fits, direct.failed]
            record["scores"] = {n: list(k) for n, k in placer.scores(request, names).items()}
            record["tally"] = {str(r): n for r, n in placer.failure_tally(request).items()}
            record["select"] = placer.for_request(request).select(request)
        ranked = [(s, n) for n, s in zip(feasible.fits, scores, strict=True) if s is not None]
        if ranked:
            best = max(ranked, key=lambda x: x[0])[1]
            assignment = placer.decide(request, best)
            record["bind"] = assignment.model_dump(mode="json")
            placer.commit(f"answers/{i}", request, assignment)
        lines.append(json.dumps(record, sort_keys=True))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="500,5000")
    parser.add_argument("--policy", default="fgd-cpu,fgd,binpack")
    parser.add_argument("--vendor", default="mock,nvidia")
    parser.add_argument("--decisions", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    digest = hashlib.sha256()
    with args.out.open("w") as fh:
        for vendor in args.vendor.split(","):
            for n in (int(x) for x in args.nodes.split(",")):
                count = args.decisions if n <= 1000 else max(50, args.decisions // 3)
                for policy in args.policy.split(","):
                    head = f"# {vendor} {n} nodes {policy}"
                    fh.write(head + "\n")
                    for line in answers(n, policy, count, args.seed, vendor):
                        fh.write(line + "\n")
                        digest.update(line.encode())
                    print(head, file=sys.stderr)
    print(digest.hexdigest())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The 17-trace table beside the FGD authors' results, from `simulate --json` documents.

A 10-seed table of every trace takes hours on 2 cores, so it is run one seed at a time,
each seed's document kept (a run that stops keeps the seeds it finished):

    for s in $(seq 42 51); do
      uv run xpushare simulate --trace all --seed $s --policy fgd,fgd-cpu --jobs 2 \\
          --json --quiet > table-$s.json
    done
    uv run python benchmarks/reference_table.py table-*.json --plot docs/images/fgd-deltas.png

Prints a Markdown table: per trace, each policy's mean over the seeds found, the authors'
FGD (and BestFit for `best-fit`) over the same seeds, the deltas, and the mean of the deltas.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from xpushare.simulator.datasets import TRACES
from xpushare.simulator.reference import (
    BASELINE,
    Comparison,
    compare,
    load_reference,
    seed_text,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("documents", nargs="+", type=Path)
    ap.add_argument("--reference", type=Path, help="reference CSV (default: the shipped one)")
    ap.add_argument("--plot", type=Path, help="draw the deltas to their FGD to this PNG")
    ap.add_argument("--target", type=int, default=100)
    args = ap.parse_args()

    ours: dict[str, dict[str, dict[int, float]]] = {}
    for path in args.documents:
        doc = json.loads(path.read_text())
        for trace_doc in doc.get("traces", [doc]):
            trace = trace_doc.get("trace")
            if trace is None:
                continue
            for run in trace_doc["runs"]:
                by_policy = ours.setdefault(trace, {}).setdefault(run["policy"], {})
                by_policy[run["seed"]] = run["allocation_percent"]
    ref = load_reference(args.reference)
    rows: list[Comparison] = []
    for trace in [t for t in TRACES if t in ours] + sorted(set(ours) - set(TRACES)):
        rows.extend(compare(ref, trace, ours[trace], args.target))
    policies = list(dict.fromkeys(r.policy for r in rows))
    # A policy with a counterpart of theirs other than FGD (best-fit: BestFit) is also
    # compared with it, in a column of its own.
    own = {
        p: name
        for p in policies
        for name in {r.their_policy for r in rows if r.policy == p}
        if name is not None and name != BASELINE
    }
    head = ["trace", "seeds", "their FGD"]
    for p in policies:
        head += [f"our `{p}`", "Δ"]
        if p in own:
            head += [f"their {own[p]}", f"Δ to {own[p]}"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for trace in dict.fromkeys(r.trace for r in rows):
        mine = {r.policy: r for r in rows if r.trace == trace}
        first = next(iter(mine.values()))
        cells = [trace, seed_text(first.seeds), _num(first.their_fgd)]
        for p in policies:
            r = mine.get(p)
            cells += [_num(r.ours if r else None), _delta(r.delta_fgd if r else None)]
            if p in own:
                cells += [_num(r.theirs if r else None), _delta(r.delta if r else None)]
        print("| " + " | ".join(cells) + " |")
    for p in policies:
        deltas = [r.delta_fgd for r in rows if r.policy == p and r.delta_fgd is not None]
        if deltas:
            within = sum(1 for d in deltas if abs(d) <= 0.15)
            print(
                f"\n`{p}`: mean Δ {statistics.fmean(deltas):+.2f} over {len(deltas)} traces,"
                f" {sum(1 for d in deltas if d < 0)} below their FGD, worst {min(deltas):+.2f},"
                f" best {max(deltas):+.2f}, {within} within ±0.15"
            )
        theirs = [r.delta for r in rows if r.policy == p and p in own and r.delta is not None]
        if theirs:
            print(
                f"\n`{p}` against their {own[p]}: mean Δ {statistics.fmean(theirs):+.2f} over"
                f" {len(theirs)} traces, worst {min(theirs):+.2f}, best {max(theirs):+.2f},"
                f" {sum(1 for d in theirs if abs(d) <= 0.3)} within ±0.3"
            )
    if args.plot is not None:
        from xpushare.simulator.report import plot_deltas

        seeds = sorted({s for r in rows for s in r.seeds})
        plot_deltas(
            rows,
            args.plot,
            title=f"GPUs allocated at {args.target}% arrived demand, ours minus the FGD"
            f" authors' FGD (seeds {seed_text(seeds)})",
        )
        print(f"\nplot: {args.plot}")
    return 0


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _delta(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2f}"


if __name__ == "__main__":
    sys.exit(main())

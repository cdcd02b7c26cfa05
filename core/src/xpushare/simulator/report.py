"""Summaries of simulation runs: per policy over seeds, as a table, JSON and a plot."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xpushare.simulator.engine import RunResult
from xpushare.simulator.reference import Comparison


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """One policy over every seed it ran with."""

    policy: str
    seeds: tuple[int, ...]
    allocation_percent: float
    allocation_min: float
    allocation_max: float
    unallocated_gpus: float
    fragmentation_gpus: float
    fragmentation_percent: float
    tasks_arrived: float
    tasks_placed: float
    failures: dict[str, float]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "seeds": list(self.seeds),
            "allocation_percent": round(self.allocation_percent, 3),
            "allocation_percent_min": round(self.allocation_min, 3),
            "allocation_percent_max": round(self.allocation_max, 3),
            "unallocated_gpus": round(self.unallocated_gpus, 2),
            "fragmentation_gpus": round(self.fragmentation_gpus, 2),
            "fragmentation_percent_of_free": round(self.fragmentation_percent, 2),
            "tasks_arrived": round(self.tasks_arrived, 1),
            "tasks_placed": round(self.tasks_placed, 1),
            "failures": {k: round(v, 1) for k, v in self.failures.items()},
            "seconds_per_run": round(self.seconds, 2),
        }


def summarize(runs: Sequence[RunResult]) -> list[PolicySummary]:
    """Means over seeds, one row per policy, in the order policies first appear."""
    by_policy: dict[str, list[RunResult]] = defaultdict(list)
    for r in runs:
        by_policy[r.policy].append(r)
    out = []
    for policy, rs in by_policy.items():
        alloc = [r.allocation_ratio for r in rs]
        failures: Counter[str] = Counter()
        for r in rs:
            failures.update(r.failures)
        out.append(
            PolicySummary(
                policy=policy,
                seeds=tuple(r.seed for r in rs),
                allocation_percent=statistics.fmean(alloc),
                allocation_min=min(alloc),
                allocation_max=max(alloc),
                unallocated_gpus=statistics.fmean(r.unallocated_gpus for r in rs),
                fragmentation_gpus=statistics.fmean(r.fragmentation_gpus for r in rs),
                fragmentation_percent=statistics.fmean(r.fragmentation_ratio for r in rs),
                tasks_arrived=statistics.fmean(r.tasks_arrived for r in rs),
                tasks_placed=statistics.fmean(r.tasks_placed for r in rs),
                failures={k: v / len(rs) for k, v in failures.most_common()},
                seconds=statistics.fmean(r.seconds for r in rs),
            )
        )
    return out


def mean_curve(runs: Sequence[RunResult], step: float = 1.0) -> list[tuple[float, float]]:
    """Allocation against arrived demand, averaged over runs at every *step* percent."""
    if not runs:
        return []
    end = min(r.curve[-1][0] for r in runs if r.curve)
    xs = []
    x = 0.0
    while x <= end + 1e-9:
        xs.append(x)
        x += step
    out = []
    for x in xs:
        ys = []
        for r in runs:
            ys.append(next((b for a, b in r.curve if a >= x - 1e-9), r.curve[-1][1]))
        out.append((x, statistics.fmean(ys)))
    return out


def plot(runs: Sequence[RunResult], path: Path, title: str) -> None:
    """allocation ratio against arrived demand, one line per policy, to a PNG file."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError(
            "--plot needs matplotlib: pip install 'xpushare[plot]' (or uv sync --extra plot)"
        ) from None
    by_policy: dict[str, list[RunResult]] = defaultdict(list)
    for r in runs:
        by_policy[r.policy].append(r)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    top = 0.0
    for policy, rs in by_policy.items():
        curve = mean_curve(rs)
        xs = [a for a, _ in curve]
        ys = [b for _, b in curve]
        top = max(top, xs[-1] if xs else 0.0)
        final = (
            rs[0].allocation_ratio
            if len(rs) == 1
            else statistics.fmean(r.allocation_ratio for r in rs)
        )
        ax.plot(xs, ys, label=f"{policy} ({final:.2f}%)", linewidth=1.6)
    ax.plot([0, top], [0, top], color="grey", linestyle=":", linewidth=1, label="all placed")
    ax.set_xlabel("arrived GPU demand (% of fleet capacity)")
    ax.set_ylabel("GPUs allocated (% of fleet capacity)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left")
    if top > 60:
        ax.set_xlim(60, top + 1)
        ax.set_ylim(60, top + 1)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_deltas(rows: Sequence[Comparison], path: Path, title: str) -> None:
    """Our allocation minus the reference's FGD, per trace, one bar per policy, to a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError(
            "--plot needs matplotlib: pip install 'xpushare[plot]' (or uv sync --extra plot)"
        ) from None
    traces = list(dict.fromkeys(r.trace for r in rows))
    policies = list(dict.fromkeys(r.policy for r in rows))
    width = 0.8 / max(1, len(policies))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.55 * len(traces) + 2), 4.5), dpi=120)
    for k, policy in enumerate(policies):
        by_trace = {r.trace: r.delta_fgd for r in rows if r.policy == policy}
        xs = [i + (k - (len(policies) - 1) / 2) * width for i in range(len(traces))]
        ys = [by_trace.get(t) or 0.0 for t in traces]
        ax.bar(xs, ys, width=width, label=policy)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(traces)))
    ax.set_xticklabels(traces, rotation=45, ha="right")
    ax.set_ylabel("GPUs allocated: ours - their FGD (points)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

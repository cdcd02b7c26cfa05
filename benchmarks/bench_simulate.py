"""Wall time of a full openb trace replay, per policy (target: <= 60 s on 2 cores).

Replays the whole default trace (1,213 GPU nodes, 6,212 GPUs, 8,152 tasks inflated per the
FGD protocol, arrivals up to 100 % of capacity) once per policy through
:class:`xpushare.simulator.Simulation`, the path ``xpushare simulate`` takes, and prints
the wall and CPU time of each run with its allocation ratio (on a shared machine the CPU
time is what the replay itself cost). Single-threaded: the second core of a
2-core machine stays free.

Usage: ``uv run python benchmarks/bench_simulate.py [--trace default] [--data-dir DIR]
[--policy best-fit,fgd,fgd-cpu] [--seed 42]``. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

from xpushare.plugins import PluginHost
from xpushare.simulator import Simulation, read_nodes, read_tasks
from xpushare.simulator.datasets import trace_files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="default")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--policy", default="best-fit,fgd,fgd-cpu")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    nodes_path, pods_path = trace_files(args.trace, args.data_dir)
    started = time.perf_counter()
    nodes, tasks = read_nodes(nodes_path), read_tasks(pods_path)
    host = PluginHost.from_environment()
    sim = Simulation(nodes, tasks, host=host)
    setup = time.perf_counter() - started
    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs; openb {args.trace}: "
        f"{len(nodes)} nodes, {sim.capacity} GPUs, {len(tasks)} tasks; setup {setup:.1f} s"
    )
    for policy in args.policy.split(","):
        result = sim.run(policy, seed=args.seed)
        print(
            f"{policy:<10} {result.seconds:6.1f} s wall, {result.cpu_seconds:6.1f} s CPU  "
            f"{result.tasks_arrived} arrivals "
            f"({result.seconds / max(1, result.tasks_arrived) * 1000:.2f} ms each), "
            f"allocation {result.allocation_ratio:.2f}% at {result.arrived_ratio:.1f}% arrived"
        )


if __name__ == "__main__":
    main()

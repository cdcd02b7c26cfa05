"""The short version of benchmarks/bench_candidates.py that CI runs: both paths complete on a
small fleet and print their figures (printed, never asserted: machines are noisy)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "bench_candidates.py"


@pytest.mark.parametrize("path", [[], ["--node-by-node"]])
def test_bench_candidates_runs_small(path: list[str]) -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--nodes", "200", "--decisions", "40", *path],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=SCRIPT.parent,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    name = "node by node" if path else "candidate rows"
    assert f"200 nodes, 200 candidates, 40 decisions, fgd-cpu, {name}: check" in run.stdout

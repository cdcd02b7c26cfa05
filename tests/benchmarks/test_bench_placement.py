"""The short version of benchmarks/bench_placement.py that CI runs: both vendors' fleets
complete a small run and print their figures (printed, never asserted: machines are noisy);
the NVIDIA run goes through the installed plugin's fit hook."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "bench_placement.py"


@pytest.mark.parametrize("vendor", ["mock", "nvidia"])
def test_bench_placement_runs_small(vendor: str) -> None:
    args = ["--nodes", "60", "--decisions", "60", "--runs", "1", "--policy", "fgd-cpu"]
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--vendor", vendor],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=SCRIPT.parent,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for regime in ("cold", "stream"):
        assert f"60 nodes  fgd-cpu  {regime}" in run.stdout, run.stdout

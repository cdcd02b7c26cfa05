"""The short version of benchmarks/bench_throughput.py that CI runs: a small cluster through
webhook, /filter, /prioritize and /bind, with a filter worker, for the mock vendor and
NVIDIA; every pod is bound and the figures are printed (printed, never asserted: machines
are noisy)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "bench_throughput.py"


@pytest.mark.parametrize("vendor", ["mock", "nvidia"])
def test_bench_throughput_runs_small(vendor: str) -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--vendor",
            vendor,
            "--nodes",
            "60",
            "--pods",
            "40",
            "--candidates",
            "30",
            "--filter-workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=SCRIPT.parent,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{vendor}: 40 of 40 pods bound in" in run.stdout, run.stdout + run.stderr
    assert "filter worker 0 CPU" in run.stdout
    assert "this machine's speed: a reference loop took" in run.stdout

"""The short version of benchmarks/bench_realcluster.py: a few nodes and pods through the real
kube-scheduler with and without our extender; every pod is bound and the figures are printed
(printed, never asserted: machines are noisy)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.realcluster

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "bench_realcluster.py"


def test_bench_realcluster_runs_small(kube_binaries: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--nodes", "20", "--pods", "20", "--vendor", "mock"],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "XPUSHARE_KUBE_BIN": str(kube_binaries)},
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    print(run.stdout)
    # The table's rows: phase, pods bound, pods/s, created in, nodes, most on one node.
    rows = dict(re.findall(r"^(plain|extender) +(\d+) +[\d.]+ ", run.stdout, re.MULTILINE))
    assert rows == {"plain": "20", "extender": "20"}, run.stdout
    assert "extender / plain" in run.stdout

"""The short version of benchmarks/bench_realcluster.py: a few nodes and pods through the real
kube-scheduler with and without our extender, two rounds; every pod of every phase is bound and
the figures are printed (printed, never asserted: machines are noisy)."""

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
        [
            *(sys.executable, str(SCRIPT), "--nodes", "20", "--pods", "20", "--vendor", "mock"),
            *("--rounds", "2"),
        ],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "XPUSHARE_KUBE_BIN": str(kube_binaries)},
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    print(run.stdout)
    # The table's rows: round, phase, pods bound, pods/s, created in, nodes, most on one node.
    rows = re.findall(r"^ +(\d) (plain|extender) +(\d+) +[\d.]+ ", run.stdout, re.MULTILINE)
    assert sorted(rows) == [
        ("1", "extender", "20"),
        ("1", "plain", "20"),
        ("2", "extender", "20"),
        ("2", "plain", "20"),
    ], run.stdout
    assert "extender / plain: median" in run.stdout

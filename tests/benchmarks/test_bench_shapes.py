"""The short version of benchmarks/bench_shapes.py that CI runs: it completes for both
vendors, prints its figures, and every memory-bound structure stays at or below its cap.

Times are printed, never asserted (machines are noisy); the caps are facts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "bench_shapes.py"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_shapes_runs_small_and_stays_within_its_caps() -> None:
    pytest.importorskip("xpushare_nvidia")
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--nodes", "24", "--requests", "600", "--warm", "60"],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    for vendor in ("mock", "nvidia"):
        assert re.search(rf"^{vendor}: 24 nodes x 8 GPUs", out, re.M), out
    figures = re.findall(
        r"^  (5 shapes|distinct shapes|5 shapes again)\s+n=\s*(\d+).*p99", out, re.M
    )
    assert figures.count(("distinct shapes", "600")) == 2, out
    assert re.findall(r"RSS\s+\d+\.\d MiB", out)
    caps = re.findall(r"^  caps: (.*)$", out, re.M)
    assert len(caps) == 2, out
    for line in caps:
        for name, size, cap in re.findall(r"([a-z -]+(?: \(largest\))?) ([\d,]+)/([\d,]+)", line):
            assert int(size.replace(",", "")) <= int(cap.replace(",", "")), (name, line)
        # 600 distinct requests on 24 nodes fill the per-state answers: the bound is
        # exercised. (Node memos no longer fill with the mock vendor: the answers FGD shares
        # between nodes in one state are kept only in its bounded table.)
        assert "node-state answers (largest) 32/32" in line, line
        assert "model refresh failures 0" in line

"""The short version of benchmarks/bench_looplag.py that CI runs: both phases complete, the
figures are printed, and every hostile request is answered as the bounds say.

Times are printed, never asserted (machines are noisy); the answers are facts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "bench_looplag.py"


@pytest.mark.timeout(300)
def test_bench_looplag_runs_short_and_the_hostile_mix_is_answered() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--huge", "2000"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    for phase in ("quiet", "hostile"):
        assert re.search(rf"^{phase}:$", out, re.M), out
    assert len(re.findall(r"^  event loop lag \(5 ms timer\)\s+n=\s*\d+.*p99", out, re.M)) == 2
    assert len(re.findall(r"^  /filter end to end\s+n=\s*\d+.*p99", out, re.M)) == 2

    def statuses(label: str) -> set[str]:
        found = re.search(rf"^  {re.escape(label)}\s+answered: (.*)$", out, re.M)
        assert found, (label, out)
        return set(re.findall(r"\d+ x (\d+)", found.group(1)))

    # Past the container bound: every node refused (200), the webhook's denial (200);
    # 100,000 names: 400; at the bound: answered (200); what-ifs: 400 past it, 200 at it.
    assert statuses("filter, huge pod") == {"200"}
    assert statuses("webhook, huge pod") == {"200"}
    assert statuses("filter, 100,000 names") == {"400"}
    assert statuses("filter, 256 demands x every node") == {"200"}
    assert statuses("what-if client 1") <= {"200", "400"}

"""The short run of the scheduler fault soak (the long one: benchmarks/soak_scheduler.py)."""

from __future__ import annotations

import pytest

from xpushare.testing.soak import SoakConfig, run_soak

pytestmark = pytest.mark.slow


async def test_short_fault_soak_keeps_every_invariant(tmp_path):
    report = await run_soak(SoakConfig(duration_s=20, nodes=8, clients=3, log_dir=tmp_path))
    assert report.faults, "no fault was injected"
    assert report.binds["bound"] > 5, report.lines()
    assert report.overcommits == [], report.lines()
    assert report.ledger_mismatches == [], report.lines()
    assert report.reservations_left == 0, report.lines()

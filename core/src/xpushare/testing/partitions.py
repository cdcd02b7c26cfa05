"""Real partition geometries for tests (NVIDIA's A100 tables): see
:mod:`xpushare.simulator.migprofiles`, where the simulator takes them from."""

from xpushare.simulator.migprofiles import (
    A100_40GB,
    A100_80GB,
    A100_SMS,
    MigProfileSpec,
    profiles,
)

__all__ = ["A100_40GB", "A100_80GB", "A100_SMS", "MigProfileSpec", "profiles"]

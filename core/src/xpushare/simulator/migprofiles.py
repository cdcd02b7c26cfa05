"""Real MIG geometries: what the simulator's MIG fleets are cut by, and what tests and fake
vendor libraries use.

The A100 tables are NVIDIA's (MIG User Guide, "Supported MIG Profiles", and what
``nvidia-smi mig -lgip`` / ``-lgipp`` print on those GPUs): for each GPU instance profile its
NVML profile index (``NVML_GPU_INSTANCE_PROFILE_*``), the profile id the driver reports, the
name, compute and memory slices, instance count, SMs, memory in MiB, and the placements
(start, size) in memory slices. An A100 has 7 compute slices and 8 memory slices and 108
SMs; 1-slice instances cannot start at slice 7.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xpushare.models import PartitionPlacement, PartitionProfile

#: SMs of a whole A100 (GA100 as shipped), the base of a profile's compute percent.
A100_SMS = 108


@dataclass(frozen=True)
class MigProfileSpec:
    """One GPU instance profile as NVML describes it."""

    index: int  # NVML_GPU_INSTANCE_PROFILE_* (what nvmlDeviceGetGpuInstanceProfileInfo takes)
    id: int  # the profile id NVML reports (what creation and placements take)
    name: str
    compute_slices: int
    memory_slices: int
    count: int
    sms: int
    memory_mib: int
    starts: tuple[int, ...]

    def profile(self, gpu_sms: int = A100_SMS) -> PartitionProfile:
        return PartitionProfile(
            name=self.name,
            memory_mib=self.memory_mib,
            compute_percent=math.ceil(self.sms * 100 / gpu_sms),
            max_count=self.count,
            compute_slices=self.compute_slices,
            memory_slices=self.memory_slices,
            placements=tuple(
                PartitionPlacement(start=s, size=self.memory_slices) for s in self.starts
            ),
        )


_ALL_1G = (0, 1, 2, 3, 4, 5, 6)

A100_40GB: tuple[MigProfileSpec, ...] = (
    MigProfileSpec(0, 19, "1g.5gb", 1, 1, 7, 14, 4864, _ALL_1G),
    MigProfileSpec(7, 20, "1g.5gb+me", 1, 1, 1, 14, 4864, _ALL_1G),
    MigProfileSpec(9, 15, "1g.10gb", 1, 2, 4, 14, 9856, (0, 2, 4, 6)),
    MigProfileSpec(1, 14, "2g.10gb", 2, 2, 3, 28, 9856, (0, 2, 4)),
    MigProfileSpec(2, 9, "3g.20gb", 3, 4, 2, 42, 20096, (0, 4)),
    MigProfileSpec(3, 5, "4g.20gb", 4, 4, 1, 56, 20096, (0,)),
    MigProfileSpec(4, 0, "7g.40gb", 7, 8, 1, 98, 40320, (0,)),
)

A100_80GB: tuple[MigProfileSpec, ...] = (
    MigProfileSpec(0, 19, "1g.10gb", 1, 1, 7, 14, 9728, _ALL_1G),
    MigProfileSpec(7, 20, "1g.10gb+me", 1, 1, 1, 14, 9728, _ALL_1G),
    MigProfileSpec(9, 15, "1g.20gb", 1, 2, 4, 14, 19968, (0, 2, 4, 6)),
    MigProfileSpec(1, 14, "2g.20gb", 2, 2, 3, 28, 19968, (0, 2, 4)),
    MigProfileSpec(2, 9, "3g.40gb", 3, 4, 2, 42, 40192, (0, 4)),
    MigProfileSpec(3, 5, "4g.40gb", 4, 4, 1, 56, 40192, (0,)),
    MigProfileSpec(4, 0, "7g.80gb", 7, 8, 1, 98, 81152, (0,)),
)


def profiles(table: tuple[MigProfileSpec, ...]) -> tuple[PartitionProfile, ...]:
    """The inventory's profiles of a GPU with *table*."""
    return tuple(spec.profile() for spec in table)


#: The simulator's trace models that have a MIG geometry here (openb's ``A100`` is the 80 GB
#: part: 81,251 MiB in gpus.py).
GEOMETRIES: dict[str, tuple[MigProfileSpec, ...]] = {"A100": A100_80GB}

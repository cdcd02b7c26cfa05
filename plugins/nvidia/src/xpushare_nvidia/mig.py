"""MIG: which GPUs are split into instances, which instances exist, what profiles they form.

Why it matters to sharing: a GPU in MIG mode is not one device any more. HAMi-core cannot
limit a container on it, and booking it as a whole (or as a share of a whole) would hand the
same silicon to pods that MIG already isolates from each other, i.e. double-book it. So the
inventory marks such a GPU ``mode="mig"`` and lists the profiles of the instances that exist
(static MIG, carved by the operator, e.g. with ``nvidia-mig-parted``), the scheduler books
those instances by profile, and Allocate hands a container one free instance. Creating and
destroying instances on demand (dynamic MIG, a GPU in ``mig`` mode) is in
:mod:`xpushare_nvidia.dynamic`.
"""

from __future__ import annotations

import logging
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Final

from xpushare.models import PartitionProfile
from xpushare_nvidia.calls import optional, text
from xpushare_nvidia.lazy import pynvml

log = logging.getLogger(__name__)

#: The device mode of a GPU in MIG mode (``Device.mode``).
MIG_MODE: Final = "mig"
#: The device mode of every other GPU: shared through HAMi-core.
SHARED_MODE: Final = "shared"

#: Compute slices of a full MIG-capable GPU (A100/H100/H200: 7). Used only when NVML does
#: not report SM counts to compute an instance's share from.
FULL_GPU_SLICES: Final = 7

# NVML names a MIG device "<GPU name> MIG <profile>", e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb";
# profiles may carry a compute-instance prefix ("1c.2g.20gb") or a media suffix ("+me").
_PROFILE = re.compile(r"((?:\d+c\.)?\d+g\.\d+gb(?:\+[a-z]+)*)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class MigInstance:
    """One MIG device (GPU instance + compute instance) that exists on a GPU."""

    uuid: str
    profile: str
    memory_mib: int
    sm_count: int
    gpu_instance: int | None
    compute_instance: int | None
    handle: Any = field(compare=False, repr=False)


@dataclass(frozen=True)
class MigState:
    """A MIG-capable GPU's mode and instances."""

    enabled: bool
    pending: bool
    instances: tuple[MigInstance, ...] = ()


def read(handle: Any, gpu_sm_count: int) -> MigState | None:
    """The GPU's MIG state, or ``None`` when the GPU (or driver) does not do MIG."""
    modes = optional("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle)
    if modes is None:
        return None
    current, pending = (int(m) for m in modes)
    enabled = current == pynvml.NVML_DEVICE_MIG_ENABLE
    if not enabled:
        return MigState(enabled=False, pending=pending == pynvml.NVML_DEVICE_MIG_ENABLE)
    slots = optional(
        "nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle
    )
    instances = []
    for index in range(slots or 0):
        mig = optional(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
            handle,
            index,
        )
        if mig is None:  # an empty slot: instances need not be contiguous
            continue
        instance = _instance(mig)
        if instance is not None:
            instances.append(instance)
    return MigState(
        enabled=True,
        pending=pending == pynvml.NVML_DEVICE_MIG_ENABLE,
        instances=tuple(instances),
    )


def _instance(mig: Any) -> MigInstance | None:
    uuid = optional("nvmlDeviceGetUUID(MIG)", pynvml.nvmlDeviceGetUUID, mig)
    if not uuid:
        log.warning("vendor nvidia: a MIG device without a readable UUID is left out")
        return None
    memory = optional("nvmlDeviceGetMemoryInfo(MIG)", pynvml.nvmlDeviceGetMemoryInfo, mig)
    memory_mib = int(memory.total) // 2**20 if memory is not None else 0
    attributes = optional("nvmlDeviceGetAttributes(MIG)", pynvml.nvmlDeviceGetAttributes, mig)
    sm_count = int(attributes.multiprocessorCount) if attributes is not None else 0
    slices = int(attributes.gpuInstanceSliceCount) if attributes is not None else 0
    name = optional("nvmlDeviceGetName(MIG)", pynvml.nvmlDeviceGetName, mig)
    match = _PROFILE.search(text(name)) if name else None
    # Without a profile in the name, build HAMi's "<slices>g.<GiB>gb" form from the facts.
    fallback = f"{max(slices, 1)}g.{round(memory_mib / 1024)}gb"
    profile = match.group(1).lower() if match else fallback
    return MigInstance(
        uuid=text(uuid),
        profile=profile,
        memory_mib=memory_mib,
        sm_count=sm_count,
        gpu_instance=optional("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, mig),
        compute_instance=optional(
            "nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId, mig
        ),
        handle=mig,
    )


def compute_percent(instance: MigInstance, gpu_sm_count: int) -> int:
    """The instance's share of the GPU's compute, rounded up as HAMi does (§5.4)."""
    if instance.sm_count > 0 and gpu_sm_count > 0:
        share = math.ceil(instance.sm_count * 100 / gpu_sm_count)
    else:
        slices = int(instance.profile.split("g.")[0].split(".")[-1] or 1)
        share = math.ceil(slices * 100 / FULL_GPU_SLICES)
    return max(1, min(100, share))


def profiles(state: MigState, gpu_sm_count: int) -> tuple[PartitionProfile, ...]:
    """The profiles the existing instances form; ``max_count`` is how many exist."""
    groups: dict[str, list[MigInstance]] = defaultdict(list)
    for instance in state.instances:
        groups[instance.profile].append(instance)
    return tuple(
        PartitionProfile(
            name=name,
            memory_mib=min(i.memory_mib for i in members),
            compute_percent=min(compute_percent(i, gpu_sm_count) for i in members),
            max_count=len(members),
        )
        for name, members in sorted(groups.items())
    )

"""What a container gets for its Moore Threads GPUs: visible devices, and sGPU QoS limits.

Moore Threads' container toolkit injects the GPUs named by ``MTHREADS_VISIBLE_DEVICES``
(their indices); a shared GPU is confined by the host's sGPU kernel module, which reads
``MTHREADS_QOS_*`` (gpustack-devices.md §4.5). Assumption (the research names the prefix, not
the variables): ``MTHREADS_QOS_MEMORY_LIMIT`` in bytes and ``MTHREADS_QOS_COMPUTING_POWER_WEIGHT``
in sixteenths of a GPU, HAMi's ``sgpu-core`` unit. The compute share is a scheduling weight
of the kernel module, not a hard cap.
"""

from __future__ import annotations

from typing import Final

from xpushare.models import AllocateRequest, ContainerAllocation
from xpushare_others.mthreads.config import CORES_PER_GPU, MthreadsConfig

MEMORY_LIMIT_ENV: Final = "MTHREADS_QOS_MEMORY_LIMIT"
WEIGHT_ENV: Final = "MTHREADS_QOS_COMPUTING_POWER_WEIGHT"
MIB: Final = 1024 * 1024


def allocate(config: MthreadsConfig, request: AllocateRequest) -> ContainerAllocation:
    by_id = {d.id: d for d in request.devices}
    envs = {
        config.visible_devices_env: ",".join(str(by_id[s.device_id].index) for s in request.slices)
    }
    shared = [
        s
        for s in request.slices
        if s.compute_percent < 100 or s.memory_mib < by_id[s.device_id].memory_mib
    ]
    if shared:
        piece = shared[0]  # HAMi shares one GPU per container (count > 1 is whole GPUs)
        envs[MEMORY_LIMIT_ENV] = str(piece.memory_mib * MIB)
        # Back to sixteenths; the request stored floor(cores * 100 / 16) percent.
        envs[WEIGHT_ENV] = str(max(1, round(piece.compute_percent * CORES_PER_GPU / 100)))
    return ContainerAllocation(envs=envs)

"""The Moore Threads vendor's settings (``XPUSHARE_MTHREADS_CONFIG`` and the agent's section).

HAMi's names and units (hami-protocol.md §8.1): ``mthreads.com/vgpu`` counts GPUs,
``mthreads.com/sgpu-memory`` is memory in units of 512 MiB, ``mthreads.com/sgpu-core`` is
compute in sixteenths of a GPU.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from xpushare.models import ResourceNames
from xpushare_others.common.settings import VendorConfig

VENDOR: Final = "mthreads"

HAMI_NAMES: Final = ResourceNames(
    count="mthreads.com/vgpu",
    memory="mthreads.com/sgpu-memory",
    compute="mthreads.com/sgpu-core",
)
#: MiB per unit of ``mthreads.com/sgpu-memory``.
MEMORY_UNIT_MIB: Final = 512
#: ``mthreads.com/sgpu-core`` units in one GPU (HAMi's Devcore 16 per GPU).
CORES_PER_GPU: Final = 16
#: sGPU sizes HAMi accepts for one shared GPU, in 512 MiB units (2 = 1 GiB ... 96 = 48 GiB).
SGPU_MEMORY_SIZES: Final = (2, 4, 8, 16, 32, 64, 96)


class MthreadsConfig(VendorConfig):
    #: sGPUs per GPU (the sGPU kernel module's instances, gpustack-devices.md §2.6).
    share_slots: int = Field(default=CORES_PER_GPU, ge=1)
    #: Variable read by Moore Threads' container toolkit (gpustack-devices.md §4.5).
    visible_devices_env: str = "MTHREADS_VISIBLE_DEVICES"

    def names(self) -> ResourceNames:
        return self.resource_names or HAMI_NAMES

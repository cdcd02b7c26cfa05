"""The Hygon vendor's settings (``XPUSHARE_HYGON_CONFIG`` and the agent's ``hygon`` section).

Defaults are HAMi's (hami-protocol.md §8.1) and the paths of Hygon's DTK/hyhal install
(gpustack-devices.md §1.3), so a node set up for HAMi's DCU plugin works unchanged.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from xpushare.models import ResourceNames
from xpushare_others.common.settings import VendorConfig

VENDOR: Final = "hygon"

#: HAMi's Hygon resources: DCU count, memory (MiB times memoryFactor) and cores in percent.
HAMI_NAMES: Final = ResourceNames(
    count="hygon.com/dcunum", memory="hygon.com/dcumem", compute="hygon.com/dcucores"
)

#: A DCU is cut into at most 4 vDCUs (gpustack-devices.md §2.6, "hy-virtual" per-card split).
DEFAULT_SHARE_SLOTS: Final = 4


class HygonConfig(VendorConfig):
    share_slots: int = Field(default=DEFAULT_SHARE_SLOTS, ge=1)
    #: MiB per unit of ``hygon.com/dcumem`` (HAMi's memoryFactor).
    memory_factor: int = Field(default=1, ge=1)
    #: Library directories of Hygon's hy-smi/ROCm SMI build, relative to ``/`` or to each
    #: driver root (gpustack-devices.md §1.3), searched after the standard ones.
    library_dirs: tuple[str, ...] = (
        "opt/hyhal/lib",
        "opt/dtk/rocm_smi/lib",
        "opt/dtk/.hyhal/rocm_smi/lib",
        "opt/rocm/lib",
    )
    #: Bind the library's own calls to itself (RTLD_DEEPBIND); turn off only if the vendor
    #: library misbehaves with it.
    deepbind: bool = True
    #: The host's DTK install (HAMi's HYGONPATH), mounted at ``/opt/hygondriver``.
    dtk_path: str = "/opt/dtk"
    #: The host's hyhal runtime (libhsa-runtime64, libhydmi), mounted at the same path.
    hyhal_path: str = "/opt/hyhal"
    #: Host directory where per-container vDCU configs are written (HAMi: /usr/local/vgpu/dcu).
    vdev_dir: str = "/usr/local/vgpu/dcu"
    #: Where the node agent sees ``vdev_dir`` (its own hostPath mount); default the same.
    vdev_agent_dir: str | None = None

    def names(self) -> ResourceNames:
        return self.resource_names or HAMI_NAMES

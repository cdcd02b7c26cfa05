"""The Iluvatar vendor's settings (``XPUSHARE_ILUVATAR_CONFIG`` and the agent's section).

HAMi runs one Iluvatar backend per chip family and names its resources after the chip
(hami-protocol.md §8.1): ``iluvatar.ai/<chip>-vgpu``, ``iluvatar.ai/<chip>.vMem`` in units
of 256 MiB, ``iluvatar.ai/<chip>.vCore`` in percent. One xpushare deployment serves one chip
family, chosen here, so existing pod specs keep working.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from xpushare.models import ResourceNames
from xpushare_others.common.settings import VendorConfig

VENDOR: Final = "iluvatar"

#: The chips HAMi configures by default (hami-protocol.md §8.1).
HAMI_CHIPS: Final = ("MR-V100", "MR-V50", "BI-V150", "BI-V100")
#: MiB per unit of ``iluvatar.ai/<chip>.vMem`` (HAMi's Iluvatar memory unit).
MEMORY_UNIT_MIB: Final = 256
#: Iluvatar's SDK root (COREX_HOME), where IXML lives (gpustack-devices.md §1.3).
DEFAULT_COREX_HOME: Final = "/usr/local/corex"


class IluvatarConfig(VendorConfig):
    #: The chip family whose HAMi resource names this deployment serves.
    chip: str = Field(default="BI-V150", pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")
    #: Serve only GPUs whose model names the chip (a node with another family is left to
    #: that family's deployment).
    chip_filter: bool = True
    #: IXML's directories under ``/`` or each driver root.
    library_dirs: tuple[str, ...] = (
        DEFAULT_COREX_HOME.lstrip("/") + "/lib64",
        DEFAULT_COREX_HOME.lstrip("/") + "/lib",
    )
    #: Bind IXML's own calls to itself: it exports NVML's symbol names.
    deepbind: bool = True
    #: Visible devices variable read by Iluvatar's container runtime (ix-container-runtime).
    visible_devices_env: str = "IX_VISIBLE_DEVICES"
    #: Give the GPUs' device nodes too, for nodes without Iluvatar's container runtime.
    device_nodes: bool = False
    #: Enforce slices with HAMi-core (libvgpu.so), which runs on corex as on CUDA
    #: (gpustack-devices.md §2.6, §4.5).
    hami_core: bool = True
    #: The node directory holding ``libvgpu.so`` and ``ld.so.preload`` (HAMi's layout).
    hami_core_dir: str = "/usr/local/vgpu"

    def names(self) -> ResourceNames:
        if self.resource_names is not None:
            return self.resource_names
        return ResourceNames(
            count=f"iluvatar.ai/{self.chip}-vgpu",
            memory=f"iluvatar.ai/{self.chip}.vMem",
            compute=f"iluvatar.ai/{self.chip}.vCore",
        )

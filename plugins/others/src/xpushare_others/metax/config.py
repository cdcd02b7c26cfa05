"""The MetaX vendor's settings (``XPUSHARE_METAX_CONFIG`` and the agent's ``metax`` section).

HAMi has two MetaX backends (hami-protocol.md §8.1): whole GPUs as ``metax-tech.com/gpu``,
and shared sGPUs as ``metax-tech.com/sgpu`` with ``metax-tech.com/vcore`` (percent) and
``metax-tech.com/vmemory`` (a bare number is GiB, a number with a unit is bytes). A node runs
one of them, so one xpushare deployment serves one mode, chosen here.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from xpushare.models import ResourceNames
from xpushare_others.common.settings import VendorConfig

VENDOR: Final = "metax"

GPU_NAMES: Final = ResourceNames(count="metax-tech.com/gpu")
SGPU_NAMES: Final = ResourceNames(
    count="metax-tech.com/sgpu", memory="metax-tech.com/vmemory", compute="metax-tech.com/vcore"
)
#: MiB per unit of a bare ``metax-tech.com/vmemory`` number (GiB).
SGPU_MEMORY_UNIT_MIB: Final = 1024
#: sGPUs per MetaX GPU (GPUStack's DefaultDevCnt, gpustack-devices.md §2.6).
DEFAULT_SGPUS: Final = 16


class MetaxConfig(VendorConfig):
    #: ``sgpu``: shared sGPUs (HAMi's Metax-SGPU); ``gpu``: whole GPUs only (Metax-GPU).
    mode: Literal["sgpu", "gpu"] = "sgpu"
    share_slots: int = Field(default=DEFAULT_SGPUS, ge=1)
    #: MXSML's install directories (MetaX's pymxsml searches the same), relative to ``/``
    #: or to each driver root.
    library_dirs: tuple[str, ...] = ("opt/mxdriver/lib", "opt/maca/lib", "opt/mxn100/lib")
    #: Node-wide MetaX device nodes a container needs besides its GPUs' DRM nodes
    #: (gpustack-devices.md §4.5); those the host lacks are left out.
    control_nodes: tuple[str, ...] = ("/dev/mxcd", "/dev/mxnd", "/dev/mxgd")
    #: Variable naming a container's sGPU slices for MetaX's runtime (GPUStack's name).
    sgpus_env: str = "METAX_SGPUS"

    def names(self) -> ResourceNames:
        if self.resource_names is not None:
            return self.resource_names
        return SGPU_NAMES if self.mode == "sgpu" else GPU_NAMES

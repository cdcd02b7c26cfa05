"""The T-Head vendor's settings (``XPUSHARE_THEAD_CONFIG`` and the agent's ``thead`` section).

HAMi has no T-Head backend; GPUStack's operator serves PPUs as ``alibabacloud.com/ppu``
(gpustack-devices.md §1) with its sliced form's ``.sliced.memory-mib``,
``.sliced.memory-percentage`` and ``.sliced.cores-percentage`` (§3.1), used here as the memory
and compute resources of the same count.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from xpushare.models import ResourceNames
from xpushare_others.common.settings import VendorConfig

VENDOR: Final = "thead"
BASE: Final = "alibabacloud.com/ppu"
NAMES: Final = ResourceNames(
    count=BASE,
    memory=f"{BASE}.sliced.memory-mib",
    memory_percent=f"{BASE}.sliced.memory-percentage",
    compute=f"{BASE}.sliced.cores-percentage",
)
#: T-Head's SDK root, PPU_HOME (gpustack-devices.md §1.3).
DEFAULT_PPU_HOME: Final = "/usr/local/PPU_SDK"


class TheadConfig(VendorConfig):
    #: HGML's directories under ``/`` or each driver root (``<PPU_HOME>/lib64`` or ``lib``).
    library_dirs: tuple[str, ...] = (
        DEFAULT_PPU_HOME.lstrip("/") + "/lib64",
        DEFAULT_PPU_HOME.lstrip("/") + "/lib",
    )
    #: Bind HGML's own calls to itself (it exports NVML-shaped names).
    deepbind: bool = True
    #: Node-wide PPU nodes every container gets (gpustack-devices.md §4.5).
    control_nodes: tuple[str, ...] = ("/dev/alixpu", "/dev/alixpu_ctl")
    #: Enforce slices with T-Head's HGGC quota shim (``hggc_quota.so`` with
    #: ``hgml_dlsym_hook.so``), preloaded through a mounted ``/etc/ld.so.preload``.
    quota: bool = True
    #: The node directory holding the shims and their ``ld.so.preload`` (GPUStack's vppu tree).
    quota_dir: str = "/usr/local/vppu"
    #: Where the shim keeps a container's ledger (inside the container).
    ledger_path: str = "/var/run/vppu/ledger"
    #: The shim's verbosity (1: denials and errors, its own default), unless the pod sets it.
    log_level: int = Field(default=1, ge=0, le=5)
    #: Where the node agent records the MIG instances it cut, one file per container, so a
    #: release after an agent restart still finds them: under kubelet's device-plugin
    #: directory, which the agent mounts from the host.
    journal_dir: str = "/var/lib/kubelet/device-plugins/xpushare-thead-mig"
    #: The driver's capability records of MIG instances (GPUStack's thead-mig.md).
    capabilities_root: str = "/proc/driver/alixpu/capabilities"
    #: Where the capability device nodes those records name are (``alixpu-cap<minor>``).
    capability_nodes: str = "/dev/alixpu-caps"

    def names(self) -> ResourceNames:
        return self.resource_names if self.resource_names is not None else NAMES

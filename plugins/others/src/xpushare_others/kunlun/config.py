"""The Kunlun vendors' settings (``XPUSHARE_KUNLUN_CONFIG`` and the agent's sections).

HAMi has two Kunlun backends (hami-protocol.md §8.1): whole XPUs as ``kunlunxin.com/xpu``
(HAMi's ``kunlun``) and shared vXPUs as ``kunlunxin.com/vxpu`` with
``kunlunxin.com/vxpu-memory`` in MiB (HAMi's ``XPU``). xpushare has one entry point for each,
``kunlun`` and ``kunlun-vxpu``, named as the core's HAMi key table names them, so the pods
HAMi placed are counted against the same devices. Both read the one Kunlun settings file; its
``mode`` says which of the two a node serves, and the other stays inactive there, so a node
never offers the same XPU under two resources.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from xpushare.models import ResourceNames
from xpushare_others.common.settings import TwoModeVendorConfig

#: The vendor names (entry points); the settings file is named after the first.
VENDOR: Final = "kunlun"
VXPU_VENDOR: Final = "kunlun-vxpu"

XPU_NAMES: Final = ResourceNames(count="kunlunxin.com/xpu")
VXPU_NAMES: Final = ResourceNames(count="kunlunxin.com/vxpu", memory="kunlunxin.com/vxpu-memory")

#: The vXPU slice sizes in MiB, HAMi's trimMemory (hami-protocol.md §8.2): a request is
#: rounded up to the next one; the last is a whole P800 (98304 MiB, HAMi's KunlunMaxMemory).
VXPU_SIZES_MIB: Final = (24576, 49152, 98304)
#: The memory of one XPU as HAMi assumes it (KunlunMaxMemory): vXPU cores are a share of it.
XPU_MEMORY_MIB: Final = VXPU_SIZES_MIB[-1]
#: Most vXPUs on one XPU: as many of the smallest slice as fit in a whole one.
VXPU_SLOTS: Final = XPU_MEMORY_MIB // VXPU_SIZES_MIB[0]
#: Device handles Kunlun's driver has per node (HAMi's Kunlun vXPU guide: "a maximum of 32
#: handles"): each XPU holds one, and an XPU cut into vXPUs one more per slice of its size,
#: so eight XPUs cannot all be cut into quarters (8 + 8 x 4 = 40).
DRIVER_HANDLES: Final = 32


class KunlunConfig(TwoModeVendorConfig):
    #: ``xpu``: whole XPUs (vendor ``kunlun``); ``vxpu``: vXPU slices (``kunlun-vxpu``).
    mode: Literal["xpu", "vxpu"] = "xpu"
    share_slots: int = Field(default=VXPU_SLOTS, ge=1)
    #: XPUML's install directories (Kunlun's XRE), relative to ``/`` or each driver root.
    library_dirs: tuple[str, ...] = ("usr/local/xpu/lib64", "usr/local/xpu/lib", "usr/lib64")
    #: Node-wide control node every XPU container needs (Kunlun's own examples pass it).
    control_nodes: tuple[str, ...] = ("/dev/xpuctrl",)
    #: Variable the XPU runtime (xpu-container-toolkit) reads for the XPUs it exposes.
    visible_env: str = "XPU_VISIBLE_DEVICES"
    #: Device ids: ``node-index`` is HAMi's ``<node>-kunlun-<index>`` (what HAMi's pod
    #: annotations and ``use-gpuuuid`` selections name, so a migration counts HAMi's pods);
    #: ``serial`` is the XPU's serial number from XPUML.
    id_format: Literal["node-index", "serial"] = "node-index"
    #: Device handles of the node's Kunlun driver that XPUs and their vXPU cuts may take.
    max_handles: int = Field(default=DRIVER_HANDLES, ge=1, le=4096)

    def names(self, vendor: str) -> ResourceNames:
        if self.resource_names is not None:
            return self.resource_names
        return VXPU_NAMES if vendor == VXPU_VENDOR else XPU_NAMES


def mode_of(vendor: str) -> Literal["xpu", "vxpu"]:
    return "vxpu" if vendor == VXPU_VENDOR else "xpu"

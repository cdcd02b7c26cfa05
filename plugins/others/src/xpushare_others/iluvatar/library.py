"""A ctypes binding of IXML (``libixml.so``), Iluvatar's management library.

Why ctypes: there is no Python binding on PyPI (python-ecosystem.md §3.3). IXML implements
NVIDIA's NVML C API under the same function names and structs (Deep-Spark/go-ixml's api.h is
NVML's header) plus ``ixml*`` extensions such as ``ixmlDeviceGetHealth``. Because of those
names the library is loaded isolated (see :mod:`xpushare_others.common.loading`), so that a
node agent that also drives NVIDIA GPUs never mixes the two.

Assumption: the PCI call is ``nvmlDeviceGetPciInfo_v3`` with NVML's current
``nvmlPciInfo_t`` layout, which IXML's header carries.
"""

from __future__ import annotations

from ctypes import POINTER, byref, c_char_p, c_uint, c_ulonglong, c_void_p
from typing import TYPE_CHECKING, Any, Final

from xpushare_others.common import loading
from xpushare_others.common.nvml_shaped import (
    Memory,
    NvmlShapedError,
    NvmlShapedLibrary,
    Utilization,
)
from xpushare_others.common.nvml_shaped import NvmlPciInfoV3 as PciInfo
from xpushare_others.iluvatar.config import VENDOR, IluvatarConfig

if TYPE_CHECKING:
    from xpushare.native import NodeContext

SONAMES: Final = ("libixml.so",)

#: nvmlReturn_t names (NVML's header, which IXML shares).
RETURN_NAMES: Final = {
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    6: "NOT_FOUND",
    9: "DRIVER_NOT_LOADED",
    12: "LIBRARY_NOT_FOUND",
    15: "GPU_IS_LOST",
    18: "LIB_RM_VERSION_MISMATCH",
    999: "UNKNOWN",
}
#: ixmlDeviceGetHealth's value for a healthy GPU (a bit mask of problems otherwise).
HEALTH_OK: Final = 0
#: NVML's buffer sizes for UUIDs, names and the driver version.
UUID_LEN: Final = 80
NAME_LEN: Final = 96
VERSION_LEN: Final = 80


class IxmlError(NvmlShapedError):
    library_label = "Iluvatar IXML"
    device_noun = "GPU"
    check_tool = "ixsmi"
    return_names = RETURN_NAMES


_SIGNATURES: Final[dict[str, tuple[Any, ...]]] = {
    "nvmlInit_v2": (),
    "nvmlShutdown": (),
    "nvmlSystemGetDriverVersion": (c_char_p, c_uint),
    "nvmlDeviceGetCount_v2": (POINTER(c_uint),),
    "nvmlDeviceGetHandleByIndex_v2": (c_uint, POINTER(c_void_p)),
    "nvmlDeviceGetUUID": (c_void_p, c_char_p, c_uint),
    "nvmlDeviceGetName": (c_void_p, c_char_p, c_uint),
    "nvmlDeviceGetMemoryInfo": (c_void_p, POINTER(Memory)),
    "nvmlDeviceGetPciInfo_v3": (c_void_p, POINTER(PciInfo)),
    "nvmlDeviceGetMinorNumber": (c_void_p, POINTER(c_uint)),
    "nvmlDeviceGetUtilizationRates": (c_void_p, POINTER(Utilization)),
    "nvmlDeviceGetTemperature": (c_void_p, c_uint, POINTER(c_uint)),
    "nvmlDeviceGetPowerUsage": (c_void_p, POINTER(c_uint)),
    "ixmlDeviceGetHealth": (c_void_p, POINTER(c_ulonglong)),
}

STATE_KEY: Final = "ixml"


class Ixml(NvmlShapedLibrary):
    error = IxmlError
    count_function = "nvmlDeviceGetCount_v2"
    handle_function = "nvmlDeviceGetHandleByIndex_v2"
    memory_function = "nvmlDeviceGetMemoryInfo"
    utilization_function = "nvmlDeviceGetUtilizationRates"
    temperature_function = "nvmlDeviceGetTemperature"
    shutdown_function = "nvmlShutdown"
    state_key = STATE_KEY
    short_name = "IXML"
    vendor = VENDOR

    def pci(self, handle: c_void_p, index: int) -> PciInfo:
        info = PciInfo()
        self.call("nvmlDeviceGetPciInfo_v3", handle, byref(info), device=index)
        return info

    def minor(self, handle: c_void_p, index: int) -> int | None:
        return self.uint("nvmlDeviceGetMinorNumber", handle, index)

    def health(self, handle: c_void_p, index: int) -> int | None:
        value = c_ulonglong()
        ok = self.optional("ixmlDeviceGetHealth", handle, byref(value), device=index)
        return value.value if ok else None

    def power_mw(self, handle: c_void_p, index: int) -> int | None:
        return self.uint("nvmlDeviceGetPowerUsage", handle, index)


def open_ixml(ctx: NodeContext, config: IluvatarConfig) -> Ixml:
    return Ixml.open(
        ctx,
        loading.candidates(config, SONAMES, config.library_dirs),
        isolated=config.deepbind,
        required=_SIGNATURES,
        optional={},
        init="nvmlInit_v2",
        driver_version=("nvmlSystemGetDriverVersion", VERSION_LEN),
        init_failure="the Iluvatar kernel driver is not loaded, or this container cannot open "
        "the GPU nodes. Check `ixsmi` on the node.",
    )


def close_ixml(ctx: NodeContext) -> None:
    Ixml.close(ctx)


def state(ctx: NodeContext) -> Ixml:
    return Ixml.state(ctx)

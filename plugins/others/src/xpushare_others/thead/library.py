"""A ctypes binding of HGML (``libhgml.so``), T-Head's PPU management library.

Why ctypes: T-Head's ``pyhgml`` ships with its SDK, not on PyPI. HGML is NVML's C API under
``hgml`` names with NVML's structs (``pyhgml``'s ``hgmlPciInfo_t`` is ``nvmlPciInfo_t``, read
through ``hgmlDeviceGetPciInfo_v3``) and return codes, as GPUStack's ``binding/hgml`` uses it.
It is loaded isolated (see :mod:`xpushare_others.common.loading`).
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
from xpushare_others.thead.config import VENDOR, TheadConfig

if TYPE_CHECKING:
    from xpushare.native import NodeContext

SONAMES: Final = ("libhgml.so", "libhgml.so.1")

#: hgmlReturn_t names (NVML's codes).
RETURN_NAMES: Final = {
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    6: "NOT_FOUND",
    9: "DRIVER_NOT_LOADED",
    15: "GPU_IS_LOST",
    999: "UNKNOWN",
}
#: hgmlTotalEccErrors's error type and counter: uncorrected, volatile (GPUStack's rule).
ECC_UNCORRECTED: Final = 1
ECC_VOLATILE: Final = 0
UUID_LEN: Final = 96
NAME_LEN: Final = 96
VERSION_LEN: Final = 80


class HgmlError(NvmlShapedError):
    library_label = "T-Head HGML"
    device_noun = "PPU"
    check_tool = "ppu-smi"
    return_names = RETURN_NAMES


_REQUIRED: Final[dict[str, tuple[Any, ...]]] = {
    "hgmlInit_v2": (),
    "hgmlShutdown": (),
    "hgmlSystemGetDriverVersion": (c_char_p, c_uint),
    "hgmlDeviceGetCount_v2": (POINTER(c_uint),),
    "hgmlDeviceGetHandleByIndex_v2": (c_uint, POINTER(c_void_p)),
    "hgmlDeviceGetUUID": (c_void_p, c_char_p, c_uint),
    "hgmlDeviceGetName": (c_void_p, c_char_p, c_uint),
    "hgmlDeviceGetMemoryInfo": (c_void_p, POINTER(Memory)),
    "hgmlDeviceGetPciInfo_v3": (c_void_p, POINTER(PciInfo)),
    "hgmlDeviceGetMinorNumber": (c_void_p, POINTER(c_uint)),
    "hgmlDeviceGetUtilizationRates": (c_void_p, POINTER(Utilization)),
    "hgmlDeviceGetTemperature": (c_void_p, c_uint, POINTER(c_uint)),
    "hgmlDeviceGetPowerUsage": (c_void_p, POINTER(c_uint)),
}
_OPTIONAL: Final[dict[str, tuple[Any, ...]]] = {
    "hgmlDeviceGetTotalEccErrors": (c_void_p, c_uint, c_uint, POINTER(c_ulonglong)),
}

STATE_KEY: Final = "hgml"


class Hgml(NvmlShapedLibrary):
    error = HgmlError
    count_function = "hgmlDeviceGetCount_v2"
    handle_function = "hgmlDeviceGetHandleByIndex_v2"
    memory_function = "hgmlDeviceGetMemoryInfo"
    utilization_function = "hgmlDeviceGetUtilizationRates"
    temperature_function = "hgmlDeviceGetTemperature"
    shutdown_function = "hgmlShutdown"
    state_key = STATE_KEY
    short_name = "HGML"
    vendor = VENDOR

    def pci(self, handle: c_void_p, index: int) -> PciInfo:
        info = PciInfo()
        self.call("hgmlDeviceGetPciInfo_v3", handle, byref(info), device=index)
        return info

    def uncorrected_ecc(self, handle: c_void_p, index: int) -> int | None:
        value = c_ulonglong()
        ok = self.optional(
            "hgmlDeviceGetTotalEccErrors",
            handle,
            ECC_UNCORRECTED,
            ECC_VOLATILE,
            byref(value),
            device=index,
        )
        return value.value if ok else None


def open_hgml(ctx: NodeContext, config: TheadConfig) -> Hgml:
    return Hgml.open(
        ctx,
        loading.candidates(config, SONAMES, config.library_dirs),
        isolated=config.deepbind,
        required=_REQUIRED,
        optional=_OPTIONAL,
        init="hgmlInit_v2",
        driver_version=("hgmlSystemGetDriverVersion", VERSION_LEN),
        init_failure="the PPU driver is not loaded, or this container cannot open "
        "/dev/alixpu*. Check `ppu-smi` on the node.",
    )


def close_hgml(ctx: NodeContext) -> None:
    Hgml.close(ctx)


def state(ctx: NodeContext) -> Hgml:
    return Hgml.state(ctx)

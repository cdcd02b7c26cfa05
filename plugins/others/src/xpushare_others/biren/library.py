"""A ctypes binding of BRML (``libbiren-ml.so``), Biren's management library.

Why ctypes: Biren's bindings are Go (go-brml) and a Python module shipped with its SDK, none
on PyPI. Names and structs follow ``brml.h`` (BRML API version 1), NVML-shaped: opaque
device handles, ``brmlReturn_t`` codes, ``brmlMemory_t`` in bytes, power in milliwatts. SVI
(Biren's GPU split into 2 or 4 instances) calls are newer than that header and optional: their
shape is go-brml's (``brmlDeviceGetSviMode(device, *current, *pending)``,
``brmlDeviceGetGpuInstanceById(device, id, *instance)``).
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char, c_char_p, c_uint, c_void_p
from typing import TYPE_CHECKING, Any, Final

from xpushare_others.biren.config import VENDOR, BirenConfig
from xpushare_others.common import loading
from xpushare_others.common.nvml_shaped import (
    Memory,
    NvmlShapedError,
    NvmlShapedLibrary,
    Utilization,
)

if TYPE_CHECKING:
    from xpushare.native import NodeContext

SONAMES: Final = ("libbiren-ml.so", "libbiren-ml.so.1")

#: brmlReturn_t names (brml.h).
RETURN_NAMES: Final = {
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    5: "NOT_FOUND",
    7: "DRIVER_NOT_LOADED",
    8: "TIMEOUT",
    15: "BUSY",
    16: "DRIVER_VERSION_MISMATCH",
    0xFF: "UNKNOWN",
}
#: brmlGpuHealthStatus_t: OK, WARNING, CRITICAL_WARNING, ERROR.
HEALTH_NAMES: Final = {0: "OK", 1: "WARNING", 2: "CRITICAL_WARNING", 3: "ERROR"}
#: From CRITICAL_WARNING on, a GPU is not given to new pods.
HEALTH_UNHEALTHY_FROM: Final = 2
#: brml.h buffer sizes.
UUID_LEN: Final = 80
VERSION_LEN: Final = 80


class PciInfo(ctypes.Structure):
    """brmlPciInfo_t (not NVML's: no legacy bus id, a function number)."""

    _fields_ = [
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("function", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * 32),
    ]


class GpuInfo(ctypes.Structure):
    """brmlGPUInfo_t."""

    _fields_ = [
        ("name", c_char * 96),
        ("id", c_char * 96),
        ("serial", c_char * 96),
        ("board_id", c_char * 96),
    ]


class BrmlError(NvmlShapedError):
    library_label = "Biren BRML"
    device_noun = "GPU"
    check_tool = "brsmi"
    return_names = RETURN_NAMES


_REQUIRED: Final[dict[str, tuple[Any, ...]]] = {
    "brmlInit": (),
    "brmlShutdown": (),
    "brmlSystemGetDriverVersion": (c_char_p, c_uint),
    "brmlDeviceGetCount": (POINTER(c_uint),),
    "brmlDeviceGetHandleByIndex": (c_uint, POINTER(c_void_p)),
    "brmlDeviceGetUUID": (c_void_p, c_char_p, c_uint),
    "brmlDeviceGetGpuInfo": (c_void_p, POINTER(GpuInfo)),
    "brmlDeviceGetMemoryInfo": (c_void_p, POINTER(Memory)),
    "brmlDeviceGetPciInfo": (c_void_p, POINTER(PciInfo)),
    "brmlDeviceGetNodeId": (c_void_p, POINTER(c_uint)),
    "brmlDeviceGetHealthStatus": (c_void_p, POINTER(c_uint)),
    "brmlDeviceGetUtilizationRates": (c_void_p, POINTER(Utilization)),
    "brmlDeviceGetTemperature": (c_void_p, c_uint, POINTER(c_uint)),
    "brmlDeviceGetPowerUsage": (c_void_p, POINTER(c_uint)),
}
_OPTIONAL: Final[dict[str, tuple[Any, ...]]] = {
    "brmlDeviceGetSviMode": (c_void_p, POINTER(c_uint), POINTER(c_uint)),
    "brmlDeviceGetGpuInstanceById": (c_void_p, c_uint, POINTER(c_void_p)),
}

STATE_KEY: Final = "brml"


class Brml(NvmlShapedLibrary):
    error = BrmlError
    count_function = "brmlDeviceGetCount"
    handle_function = "brmlDeviceGetHandleByIndex"
    memory_function = "brmlDeviceGetMemoryInfo"
    utilization_function = "brmlDeviceGetUtilizationRates"
    temperature_function = "brmlDeviceGetTemperature"
    shutdown_function = "brmlShutdown"
    state_key = STATE_KEY
    short_name = "BRML"
    vendor = VENDOR

    def uuid(self, handle: c_void_p, where: str) -> str:
        return self.text("brmlDeviceGetUUID", handle, UUID_LEN, where)

    def name(self, handle: c_void_p, where: str) -> str:
        info = GpuInfo()
        if not self.optional("brmlDeviceGetGpuInfo", handle, byref(info), device=where):
            return ""
        return bytes(info.name).split(b"\0", 1)[0].decode(errors="replace").strip()

    def pci(self, handle: c_void_p, where: str) -> PciInfo:
        info = PciInfo()
        self.call("brmlDeviceGetPciInfo", handle, byref(info), device=where)
        return info

    def node_id(self, handle: c_void_p, where: str) -> int:
        value = c_uint()
        self.call("brmlDeviceGetNodeId", handle, byref(value), device=where)
        return value.value

    def health(self, handle: c_void_p, where: str) -> int | None:
        return self.uint("brmlDeviceGetHealthStatus", handle, where)

    def power_mw(self, handle: c_void_p, where: str) -> int | None:
        return self.uint("brmlDeviceGetPowerUsage", handle, where)

    def svi_mode(self, handle: c_void_p, where: str) -> int:
        """Instances the GPU is split into now (0 or 1: not split); 1 without SVI calls."""
        if "brmlDeviceGetSviMode" not in self.fns or "brmlDeviceGetGpuInstanceById" not in self.fns:
            return 1
        current, pending = c_uint(), c_uint()
        ok = self.optional(
            "brmlDeviceGetSviMode", handle, byref(current), byref(pending), device=where
        )
        return current.value if ok else 1

    def instance(self, handle: c_void_p, index: int, where: str) -> c_void_p:
        h = c_void_p()
        self.call("brmlDeviceGetGpuInstanceById", handle, index, byref(h), device=where)
        return h


def open_brml(ctx: NodeContext, config: BirenConfig) -> Brml:
    return Brml.open(
        ctx,
        loading.candidates(config, SONAMES, config.library_dirs),
        isolated=False,
        required=_REQUIRED,
        optional=_OPTIONAL,
        init="brmlInit",
        driver_version=("brmlSystemGetDriverVersion", VERSION_LEN),
        init_failure="the Biren kernel driver is not loaded, or this container cannot open "
        "/dev/biren. Check `brsmi` on the node.",
    )


def close_brml(ctx: NodeContext) -> None:
    Brml.close(ctx)


def state(ctx: NodeContext) -> Brml:
    return Brml.state(ctx)

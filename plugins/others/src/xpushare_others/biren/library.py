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
from ctypes import POINTER, byref, c_char, c_char_p, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare_others.biren.config import VENDOR, BirenConfig
from xpushare_others.common import loading

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.native import NativeLibrary, NodeContext

SONAMES: Final = ("libbiren-ml.so", "libbiren-ml.so.1")

SUCCESS: Final = 0
NOT_SUPPORTED: Final = 3
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
TEMPERATURE_GPU: Final = 0
#: brml.h buffer sizes.
UUID_LEN: Final = 80
VERSION_LEN: Final = 80


class Memory(ctypes.Structure):
    """brmlMemory_t, bytes."""

    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class Utilization(ctypes.Structure):
    """brmlUtilization_t, percent."""

    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class PciInfo(ctypes.Structure):
    """brmlPciInfo_t."""

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


class BrmlError(RuntimeError):
    def __init__(self, function: str, code: int, where: str = "") -> None:
        self.function = function
        self.code = code
        at = f" for {where}" if where else ""
        super().__init__(
            f"Biren BRML call {function}{at} failed with {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}); check the GPU with `brsmi` and the kernel "
            "log (dmesg)"
        )


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


@dataclass
class Brml:
    library: NativeLibrary
    fns: dict[str, Callable[..., int]] = field(default_factory=dict)
    driver_version: str = ""

    def call(self, name: str, *args: Any, where: str = "") -> None:
        code = self.fns[name](*args)
        if code != SUCCESS:
            raise BrmlError(name, code, where)

    def optional(self, name: str, *args: Any, where: str = "") -> bool:
        code = self.fns[name](*args)
        if code == NOT_SUPPORTED:
            return False
        if code != SUCCESS:
            raise BrmlError(name, code, where)
        return True

    def count(self) -> int:
        n = c_uint()
        self.call("brmlDeviceGetCount", byref(n))
        return n.value

    def handle(self, index: int) -> c_void_p:
        h = c_void_p()
        self.call("brmlDeviceGetHandleByIndex", index, byref(h), where=f"GPU {index}")
        return h

    def uuid(self, handle: c_void_p, where: str) -> str:
        buf = ctypes.create_string_buffer(UUID_LEN)
        self.call("brmlDeviceGetUUID", handle, buf, UUID_LEN, where=where)
        return buf.value.decode(errors="replace").strip()

    def name(self, handle: c_void_p, where: str) -> str:
        info = GpuInfo()
        if not self.optional("brmlDeviceGetGpuInfo", handle, byref(info), where=where):
            return ""
        return bytes(info.name).split(b"\0", 1)[0].decode(errors="replace").strip()

    def memory(self, handle: c_void_p, where: str) -> Memory:
        mem = Memory()
        self.call("brmlDeviceGetMemoryInfo", handle, byref(mem), where=where)
        return mem

    def pci(self, handle: c_void_p, where: str) -> PciInfo:
        info = PciInfo()
        self.call("brmlDeviceGetPciInfo", handle, byref(info), where=where)
        return info

    def node_id(self, handle: c_void_p, where: str) -> int:
        value = c_uint()
        self.call("brmlDeviceGetNodeId", handle, byref(value), where=where)
        return value.value

    def health(self, handle: c_void_p, where: str) -> int | None:
        value = c_uint()
        ok = self.optional("brmlDeviceGetHealthStatus", handle, byref(value), where=where)
        return value.value if ok else None

    def utilization(self, handle: c_void_p, where: str) -> int | None:
        value = Utilization()
        ok = self.optional("brmlDeviceGetUtilizationRates", handle, byref(value), where=where)
        return value.gpu if ok else None

    def temperature(self, handle: c_void_p, where: str) -> int | None:
        value = c_uint()
        ok = self.optional(
            "brmlDeviceGetTemperature", handle, TEMPERATURE_GPU, byref(value), where=where
        )
        return value.value if ok else None

    def power_mw(self, handle: c_void_p, where: str) -> int | None:
        value = c_uint()
        ok = self.optional("brmlDeviceGetPowerUsage", handle, byref(value), where=where)
        return value.value if ok else None

    def svi_mode(self, handle: c_void_p, where: str) -> int:
        """Instances the GPU is split into now (0 or 1: not split); 1 without SVI calls."""
        if "brmlDeviceGetSviMode" not in self.fns or "brmlDeviceGetGpuInstanceById" not in self.fns:
            return 1
        current, pending = c_uint(), c_uint()
        ok = self.optional(
            "brmlDeviceGetSviMode", handle, byref(current), byref(pending), where=where
        )
        return current.value if ok else 1

    def instance(self, handle: c_void_p, index: int, where: str) -> c_void_p:
        h = c_void_p()
        self.call("brmlDeviceGetGpuInstanceById", handle, index, byref(h), where=where)
        return h


def open_brml(ctx: NodeContext, config: BirenConfig) -> Brml:
    paths = loading.candidates(config, SONAMES, config.library_dirs)
    library = loading.open_library(ctx, VENDOR, paths)
    brml = Brml(library=library)
    for name, argtypes in _REQUIRED.items():
        brml.fns[name] = library.function(name, ctypes.c_int, argtypes)
    for name, argtypes in _OPTIONAL.items():
        if library.has(name):
            brml.fns[name] = library.function(name, ctypes.c_int, argtypes)
    code = brml.fns["brmlInit"]()
    if code != SUCCESS:
        raise VendorUnavailable(
            VENDOR,
            f"{library.path} loaded, but brmlInit returned {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}): the Biren kernel driver is not loaded, or "
            "this container cannot open /dev/biren. Check `brsmi` on the node.",
        )
    buf = ctypes.create_string_buffer(VERSION_LEN)
    if brml.fns["brmlSystemGetDriverVersion"](buf, VERSION_LEN) == SUCCESS:
        brml.driver_version = buf.value.decode(errors="replace").strip()
    ctx.state[STATE_KEY] = brml
    return brml


def close_brml(ctx: NodeContext) -> None:
    brml = ctx.state.pop(STATE_KEY, None)
    if isinstance(brml, Brml):
        brml.fns["brmlShutdown"]()


def state(ctx: NodeContext) -> Brml:
    brml = ctx.state.get(STATE_KEY)
    if not isinstance(brml, Brml):
        raise VendorUnavailable(VENDOR, "BRML is not initialised: xpushare_startup did not run")
    return brml

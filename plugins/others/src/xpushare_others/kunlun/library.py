"""A ctypes binding of XPUML (``libxpuml.so``), Kunlunxin's management library.

Why ctypes: Kunlun ships no Python binding of XPUML on a package index; its device plugin
calls the C library through cgo. XPUML is shaped like NVML: ``xpumlInit``, a device count, a
handle per index, and queries by handle returning an ``xpumlReturn_t`` (0 = success, 3 = not
supported). Structs are those of Kunlun's ``xpuml.h``. Units: memory in bytes, temperature in
degrees Celsius.

Assumption: ``xpumlDeviceGetPowerUsage`` reports milliwatts, as NVML's call of the same shape
does (the header does not say).
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char, c_char_p, c_int, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare_others.common import loading
from xpushare_others.kunlun.config import KunlunConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.native import NativeLibrary, NodeContext

SONAMES: Final = ("libxpuml.so", "libxpuml.so.1")

SUCCESS: Final = 0
NOT_SUPPORTED: Final = 3
RETURN_NAMES: Final = {
    1: "XPUML_ERROR_UNINITIALIZED",
    2: "XPUML_ERROR_INVALID_ARGUMENT",
    3: "XPUML_ERROR_NOT_SUPPORTED",
    4: "XPUML_ERROR_NO_PERMISSION",
    6: "XPUML_ERROR_NOT_FOUND",
    9: "XPUML_ERROR_DRIVER_NOT_LOADED",
    12: "XPUML_ERROR_LIBRARY_NOT_FOUND",
    15: "XPUML_ERROR_XPU_IS_LOST",
    16: "XPUML_ERROR_RESET_REQUIRED",
    999: "XPUML_ERROR_UNKNOWN",
}
#: xpumlDeviceState_t values that mean the XPU cannot take work (``xpuml.h``).
BAD_STATES: Final = {205: "in reset", 207: "in error", 208: "in exception"}
#: XPUML_TEMPERATURE_XPU, the die sensor.
TEMPERATURE_XPU: Final = 0
#: Buffer for names and serials: XPUML's own buffers are 64 bytes or less.
TEXT_BUFFER: Final = 96


class PciInfo(ctypes.Structure):
    _fields_ = [
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("function", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * 32),
        ("reserved", c_ulonglong * 9),
    ]


class Memory(ctypes.Structure):
    _fields_ = [
        ("pageSizeGlobalMemory", c_ulonglong),
        ("totalGlobalMemory", c_ulonglong),
        ("freeGlobalMemory", c_ulonglong),
        ("usedGlobalMemory", c_ulonglong),
        ("pageSizeL3Memory", c_ulonglong),
        ("totalL3Memory", c_ulonglong),
        ("freeL3Memory", c_ulonglong),
        ("usedL3Memory", c_ulonglong),
        ("reserved", c_ulonglong * 8),
    ]


class Utilization(ctypes.Structure):
    _fields_ = [("xpu", c_uint), ("memory", c_uint), ("reserved", c_ulonglong * 15)]


class XpumlError(RuntimeError):
    def __init__(self, function: str, code: int, index: int | None = None) -> None:
        self.function = function
        self.code = code
        at = f" for XPU {index}" if index is not None else ""
        super().__init__(
            f"Kunlun XPUML call {function}{at} failed with {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}); check the XPU with `xpu-smi` and the kernel "
            "log (dmesg)"
        )


_HANDLE = c_void_p
_SIGNATURES: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "xpumlInit": (c_int, ()),
    "xpumlShutdown": (c_int, ()),
    "xpumlDeviceGetCount": (c_int, (POINTER(c_uint),)),
    "xpumlDeviceGetHandleByIndex": (c_int, (c_uint, POINTER(_HANDLE))),
    "xpumlDeviceGetName": (c_int, (_HANDLE, c_char_p, c_uint)),
    "xpumlDeviceGetSerial": (c_int, (_HANDLE, c_char_p, c_uint)),
    "xpumlDeviceGetMinorNumber": (c_int, (_HANDLE, POINTER(c_uint))),
    "xpumlDeviceGetPciInfo": (c_int, (_HANDLE, POINTER(PciInfo))),
    "xpumlDeviceGetMemoryInfo": (c_int, (_HANDLE, POINTER(Memory))),
    "xpumlDeviceGetState": (c_int, (_HANDLE, POINTER(c_int))),
    "xpumlDeviceGetUtilizationRates": (c_int, (_HANDLE, POINTER(Utilization))),
    "xpumlDeviceGetTemperature": (c_int, (_HANDLE, c_int, POINTER(c_uint))),
    "xpumlDeviceGetPowerUsage": (c_int, (_HANDLE, POINTER(c_uint))),
}

STATE_KEY: Final = "xpuml"


@dataclass
class Xpuml:
    library: NativeLibrary
    fns: dict[str, Callable[..., int]] = field(default_factory=dict)

    def _check(self, name: str, code: int, index: int | None) -> bool:
        if code == NOT_SUPPORTED:
            return False
        if code != SUCCESS:
            raise XpumlError(name, code, index)
        return True

    def call(self, name: str, *args: Any, index: int | None = None) -> None:
        if not self._check(name, self.fns[name](*args), index):
            raise XpumlError(name, NOT_SUPPORTED, index)

    def optional(self, name: str, *args: Any, index: int | None = None) -> bool:
        return self._check(name, self.fns[name](*args), index)

    def count(self) -> int:
        value = c_uint()
        self.call("xpumlDeviceGetCount", byref(value))
        return int(value.value)

    def handle(self, index: int) -> c_void_p:
        handle = _HANDLE()
        self.call("xpumlDeviceGetHandleByIndex", index, byref(handle), index=index)
        return handle

    def _text(self, name: str, index: int) -> str:
        buf = ctypes.create_string_buffer(TEXT_BUFFER)
        if not self.optional(name, self.handle(index), buf, TEXT_BUFFER, index=index):
            return ""
        return buf.value.decode(errors="replace").strip()

    def name(self, index: int) -> str:
        return self._text("xpumlDeviceGetName", index)

    def serial(self, index: int) -> str:
        return self._text("xpumlDeviceGetSerial", index)

    def minor(self, index: int) -> int:
        value = c_uint()
        self.call("xpumlDeviceGetMinorNumber", self.handle(index), byref(value), index=index)
        return int(value.value)

    def pci(self, index: int) -> PciInfo | None:
        info = PciInfo()
        ok = self.optional("xpumlDeviceGetPciInfo", self.handle(index), byref(info), index=index)
        return info if ok else None

    def memory(self, index: int) -> Memory:
        mem = Memory()
        self.call("xpumlDeviceGetMemoryInfo", self.handle(index), byref(mem), index=index)
        return mem

    def state(self, index: int) -> int | None:
        value = c_int()
        ok = self.optional("xpumlDeviceGetState", self.handle(index), byref(value), index=index)
        return int(value.value) if ok else None

    def utilization(self, index: int) -> int | None:
        value = Utilization()
        ok = self.optional(
            "xpumlDeviceGetUtilizationRates", self.handle(index), byref(value), index=index
        )
        return int(value.xpu) if ok else None

    def temperature(self, index: int) -> int | None:
        value = c_uint()
        ok = self.optional(
            "xpumlDeviceGetTemperature",
            self.handle(index),
            TEMPERATURE_XPU,
            byref(value),
            index=index,
        )
        return int(value.value) if ok else None

    def power_mw(self, index: int) -> int | None:
        value = c_uint()
        ok = self.optional(
            "xpumlDeviceGetPowerUsage", self.handle(index), byref(value), index=index
        )
        return int(value.value) if ok else None

    def shutdown(self) -> None:
        self.fns["xpumlShutdown"]()


def problem(state: int | None) -> str | None:
    """Why an XPU in *state* cannot be used, or None when it can (or its state is unknown)."""
    if state is None:
        return None
    return BAD_STATES.get(state)


def open_xpuml(ctx: NodeContext, config: KunlunConfig) -> Xpuml:
    paths = loading.candidates(config, SONAMES, config.library_dirs)
    library = loading.open_library(ctx, ctx.vendor, paths)
    xpuml = Xpuml(library=library)
    for name, (restype, argtypes) in _SIGNATURES.items():
        xpuml.fns[name] = library.function(name, restype, argtypes)
    code = xpuml.fns["xpumlInit"]()
    if code != SUCCESS:
        raise VendorUnavailable(
            ctx.vendor,
            f"{library.path} loaded, but xpumlInit returned {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}): the Kunlun driver (kunlun.ko) is not "
            "loaded, or this container cannot open /dev/xpuctrl. Check `xpu-smi` on the node.",
        )
    ctx.state[STATE_KEY] = xpuml
    return xpuml


def state(ctx: NodeContext) -> Xpuml:
    xpuml = ctx.state.get(STATE_KEY)
    if not isinstance(xpuml, Xpuml):
        raise VendorUnavailable(
            ctx.vendor, "XPUML is not initialised: xpushare_startup did not run"
        )
    return xpuml

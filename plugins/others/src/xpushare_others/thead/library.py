"""A ctypes binding of HGML (``libhgml.so``), T-Head's PPU management library.

Why ctypes: T-Head's ``pyhgml`` ships with its SDK, not on PyPI. HGML is NVML's C API under
``hgml`` names with NVML's structs (``pyhgml``'s ``hgmlPciInfo_t`` is ``nvmlPciInfo_t``, read
through ``hgmlDeviceGetPciInfo_v3``) and return codes, as GPUStack's ``binding/hgml`` uses it.
It is loaded isolated (see :mod:`xpushare_others.common.loading`).
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char, c_char_p, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare_others.common import loading
from xpushare_others.thead.config import VENDOR, TheadConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.native import NativeLibrary, NodeContext

SONAMES: Final = ("libhgml.so", "libhgml.so.1")

SUCCESS: Final = 0
NOT_SUPPORTED: Final = 3
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
TEMPERATURE_GPU: Final = 0
#: hgmlTotalEccErrors's error type and counter: uncorrected, volatile (GPUStack's rule).
ECC_UNCORRECTED: Final = 1
ECC_VOLATILE: Final = 0
UUID_LEN: Final = 96
NAME_LEN: Final = 96
VERSION_LEN: Final = 80


class Memory(ctypes.Structure):
    """hgmlMemory_t, bytes."""

    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class Utilization(ctypes.Structure):
    """hgmlUtilization_t, percent."""

    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class PciInfo(ctypes.Structure):
    """hgmlPciInfo_t (NVML's v3 layout)."""

    _fields_ = [
        ("busIdLegacy", c_char * 16),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * 32),
    ]


class HgmlError(RuntimeError):
    def __init__(self, function: str, code: int, index: int | None = None) -> None:
        self.function = function
        self.code = code
        at = f" for PPU {index}" if index is not None else ""
        super().__init__(
            f"T-Head HGML call {function}{at} failed with {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}); check the PPU with `ppu-smi` and the "
            "kernel log (dmesg)"
        )


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


@dataclass
class Hgml:
    library: NativeLibrary
    fns: dict[str, Callable[..., int]] = field(default_factory=dict)
    driver_version: str = ""

    def call(self, name: str, *args: Any, index: int | None = None) -> None:
        code = self.fns[name](*args)
        if code != SUCCESS:
            raise HgmlError(name, code, index)

    def optional(self, name: str, *args: Any, index: int | None = None) -> bool:
        fn = self.fns.get(name)
        if fn is None:
            return False
        code = fn(*args)
        if code == NOT_SUPPORTED:
            return False
        if code != SUCCESS:
            raise HgmlError(name, code, index)
        return True

    def count(self) -> int:
        n = c_uint()
        self.call("hgmlDeviceGetCount_v2", byref(n))
        return n.value

    def handle(self, index: int) -> c_void_p:
        h = c_void_p()
        self.call("hgmlDeviceGetHandleByIndex_v2", index, byref(h), index=index)
        return h

    def text(self, name: str, handle: c_void_p, size: int, index: int) -> str:
        buf = ctypes.create_string_buffer(size)
        self.call(name, handle, buf, size, index=index)
        return buf.value.decode(errors="replace").strip()

    def memory(self, handle: c_void_p, index: int) -> Memory:
        mem = Memory()
        self.call("hgmlDeviceGetMemoryInfo", handle, byref(mem), index=index)
        return mem

    def pci(self, handle: c_void_p, index: int) -> PciInfo:
        info = PciInfo()
        self.call("hgmlDeviceGetPciInfo_v3", handle, byref(info), index=index)
        return info

    def uint(self, name: str, handle: c_void_p, index: int) -> int | None:
        value = c_uint()
        return value.value if self.optional(name, handle, byref(value), index=index) else None

    def utilization(self, handle: c_void_p, index: int) -> int | None:
        value = Utilization()
        ok = self.optional("hgmlDeviceGetUtilizationRates", handle, byref(value), index=index)
        return value.gpu if ok else None

    def temperature(self, handle: c_void_p, index: int) -> int | None:
        value = c_uint()
        ok = self.optional(
            "hgmlDeviceGetTemperature", handle, TEMPERATURE_GPU, byref(value), index=index
        )
        return value.value if ok else None

    def uncorrected_ecc(self, handle: c_void_p, index: int) -> int | None:
        value = c_ulonglong()
        ok = self.optional(
            "hgmlDeviceGetTotalEccErrors",
            handle,
            ECC_UNCORRECTED,
            ECC_VOLATILE,
            byref(value),
            index=index,
        )
        return value.value if ok else None


def open_hgml(ctx: NodeContext, config: TheadConfig) -> Hgml:
    paths = loading.candidates(config, SONAMES, config.library_dirs)
    library = loading.open_library(ctx, VENDOR, paths, isolated=config.deepbind)
    hgml = Hgml(library=library)
    for name, argtypes in _REQUIRED.items():
        hgml.fns[name] = library.function(name, ctypes.c_int, argtypes)
    for name, argtypes in _OPTIONAL.items():
        if library.has(name):
            hgml.fns[name] = library.function(name, ctypes.c_int, argtypes)
    code = hgml.fns["hgmlInit_v2"]()
    if code != SUCCESS:
        raise VendorUnavailable(
            VENDOR,
            f"{library.path} loaded, but hgmlInit_v2 returned {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}): the PPU driver is not loaded, or this "
            "container cannot open /dev/alixpu*. Check `ppu-smi` on the node.",
        )
    buf = ctypes.create_string_buffer(VERSION_LEN)
    if hgml.fns["hgmlSystemGetDriverVersion"](buf, VERSION_LEN) == SUCCESS:
        hgml.driver_version = buf.value.decode(errors="replace").strip()
    ctx.state[STATE_KEY] = hgml
    return hgml


def close_hgml(ctx: NodeContext) -> None:
    hgml = ctx.state.pop(STATE_KEY, None)
    if isinstance(hgml, Hgml):
        hgml.fns["hgmlShutdown"]()


def state(ctx: NodeContext) -> Hgml:
    hgml = ctx.state.get(STATE_KEY)
    if not isinstance(hgml, Hgml):
        raise VendorUnavailable(VENDOR, "HGML is not initialised: xpushare_startup did not run")
    return hgml

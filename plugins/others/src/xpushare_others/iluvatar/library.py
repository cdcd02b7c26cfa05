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

import ctypes
from ctypes import POINTER, byref, c_char, c_char_p, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare_others.common import loading
from xpushare_others.iluvatar.config import VENDOR, IluvatarConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.native import NativeLibrary, NodeContext

SONAMES: Final = ("libixml.so",)

SUCCESS: Final = 0
NOT_SUPPORTED: Final = 3
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
TEMPERATURE_GPU: Final = 0
#: NVML's buffer sizes for UUIDs, names and the driver version.
UUID_LEN: Final = 80
NAME_LEN: Final = 96
VERSION_LEN: Final = 80


class Memory(ctypes.Structure):
    """nvmlMemory_t, bytes."""

    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class Utilization(ctypes.Structure):
    """nvmlUtilization_t, percent."""

    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class PciInfo(ctypes.Structure):
    """nvmlPciInfo_t."""

    _fields_ = [
        ("busIdLegacy", c_char * 16),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * 32),
    ]


class IxmlError(RuntimeError):
    def __init__(self, function: str, code: int, index: int | None = None) -> None:
        self.function = function
        self.code = code
        at = f" for GPU {index}" if index is not None else ""
        super().__init__(
            f"Iluvatar IXML call {function}{at} failed with {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}); check the GPU with `ixsmi` and the kernel "
            "log (dmesg)"
        )


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


@dataclass
class Ixml:
    library: NativeLibrary
    fns: dict[str, Callable[..., int]] = field(default_factory=dict)
    driver_version: str = ""

    def call(self, name: str, *args: Any, index: int | None = None) -> None:
        code = self.fns[name](*args)
        if code != SUCCESS:
            raise IxmlError(name, code, index)

    def optional(self, name: str, *args: Any, index: int | None = None) -> bool:
        code = self.fns[name](*args)
        if code == NOT_SUPPORTED:
            return False
        if code != SUCCESS:
            raise IxmlError(name, code, index)
        return True

    def count(self) -> int:
        n = c_uint()
        self.call("nvmlDeviceGetCount_v2", byref(n))
        return n.value

    def handle(self, index: int) -> c_void_p:
        h = c_void_p()
        self.call("nvmlDeviceGetHandleByIndex_v2", index, byref(h), index=index)
        return h

    def text(self, name: str, handle: c_void_p, size: int, index: int) -> str:
        buf = ctypes.create_string_buffer(size)
        self.call(name, handle, buf, size, index=index)
        return buf.value.decode(errors="replace").strip()

    def memory(self, handle: c_void_p, index: int) -> Memory:
        mem = Memory()
        self.call("nvmlDeviceGetMemoryInfo", handle, byref(mem), index=index)
        return mem

    def pci(self, handle: c_void_p, index: int) -> PciInfo:
        info = PciInfo()
        self.call("nvmlDeviceGetPciInfo_v3", handle, byref(info), index=index)
        return info

    def minor(self, handle: c_void_p, index: int) -> int | None:
        value = c_uint()
        ok = self.optional("nvmlDeviceGetMinorNumber", handle, byref(value), index=index)
        return value.value if ok else None

    def health(self, handle: c_void_p, index: int) -> int | None:
        value = c_ulonglong()
        ok = self.optional("ixmlDeviceGetHealth", handle, byref(value), index=index)
        return value.value if ok else None

    def utilization(self, handle: c_void_p, index: int) -> int | None:
        value = Utilization()
        ok = self.optional("nvmlDeviceGetUtilizationRates", handle, byref(value), index=index)
        return value.gpu if ok else None

    def temperature(self, handle: c_void_p, index: int) -> int | None:
        value = c_uint()
        ok = self.optional(
            "nvmlDeviceGetTemperature", handle, TEMPERATURE_GPU, byref(value), index=index
        )
        return value.value if ok else None

    def power_mw(self, handle: c_void_p, index: int) -> int | None:
        value = c_uint()
        ok = self.optional("nvmlDeviceGetPowerUsage", handle, byref(value), index=index)
        return value.value if ok else None


def open_ixml(ctx: NodeContext, config: IluvatarConfig) -> Ixml:
    paths = loading.candidates(config, SONAMES, config.library_dirs)
    library = loading.open_library(ctx, VENDOR, paths, isolated=config.deepbind)
    ixml = Ixml(library=library)
    for name, argtypes in _SIGNATURES.items():
        ixml.fns[name] = library.function(name, ctypes.c_int, argtypes)
    code = ixml.fns["nvmlInit_v2"]()
    if code != SUCCESS:
        raise VendorUnavailable(
            VENDOR,
            f"{library.path} loaded, but nvmlInit_v2 returned {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}): the Iluvatar kernel driver is not loaded, "
            "or this container cannot open the GPU nodes. Check `ixsmi` on the node.",
        )
    buf = ctypes.create_string_buffer(VERSION_LEN)
    if ixml.fns["nvmlSystemGetDriverVersion"](buf, VERSION_LEN) == SUCCESS:
        ixml.driver_version = buf.value.decode(errors="replace")
    ctx.state[STATE_KEY] = ixml
    return ixml


def close_ixml(ctx: NodeContext) -> None:
    ixml = ctx.state.pop(STATE_KEY, None)
    if isinstance(ixml, Ixml):
        ixml.fns["nvmlShutdown"]()


def state(ctx: NodeContext) -> Ixml:
    ixml = ctx.state.get(STATE_KEY)
    if not isinstance(ixml, Ixml):
        raise VendorUnavailable(VENDOR, "IXML is not initialised: xpushare_startup did not run")
    return ixml

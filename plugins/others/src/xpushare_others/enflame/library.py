"""A ctypes binding of EFML (``libefml.so``), Enflame's management library.

Why ctypes: Enflame ships EFML as a C library with a cgo binding for its own Go tools and
no Python binding on a package index. EFML addresses a GCU by its index (no handles): each
query takes the index and an out-pointer and returns an ``efmlReturn_t`` (0 = success,
3 = not supported). Structs are those of Enflame's ``efml.h``.

Units: temperature in degrees Celsius and power in watts (floats), DTU usage in percent.
Memory is read as MiB: ``efmlDevMemInfo_t.mem_used`` is a 32-bit field, which could not hold
the bytes of a 48 GB S60, and ``efsmi`` reports MiB.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_bool, c_char, c_char_p, c_float, c_int, c_uint32, c_uint64
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare_others.common import loading
from xpushare_others.enflame.config import EnflameConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.native import NativeLibrary, NodeContext

SONAMES: Final = ("libefml.so", "libefml.so.1")

SUCCESS: Final = 0
NOT_SUPPORTED: Final = 3
RETURN_NAMES: Final = {
    1: "EFML_ERROR_UNINITIALIZED",
    2: "EFML_ERROR_INVALID_ARGUMENT",
    3: "EFML_ERROR_NOT_SUPPORTED",
    4: "EFML_ERROR_LIBRARY_NOT_FOUND",
    6: "EFML_ERROR_DRIVER_NOT_LOADED",
    9: "EFML_ERROR_FUNCTION_NOT_FOUND",
    10: "EFML_ERROR_OPEN_DRIVER_VERSION",
    11: "EFML_ERROR_DRIVER_NOT_COMPATIBLE",
    12: "EFML_ERROR_NO_DEVICE",
    253: "EFML_ERROR_TIMEOUT",
    254: "EFML_ERROR_FAIL",
}
#: EFML's string buffers are MAX_CHAR_BUFF_LEN (128) bytes: what the caller must provide.
TEXT_BUFFER: Final = 128


class DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("name", c_char * TEXT_BUFFER),
        ("vendor_id", c_uint32),
        ("device_id", c_uint32),
        ("domain_id", c_uint32),
        ("bus_id", c_uint32),
        ("dev_id", c_uint32),
        ("func_id", c_uint32),
        ("logic_id", c_uint32),
    ]


class MemInfo(ctypes.Structure):
    _fields_ = [("mem_total_size", c_uint64), ("mem_used", c_uint32)]


class ThermalInfo(ctypes.Structure):
    _fields_ = [("cur_asic_temp", c_float), ("cur_mem_temp", c_float), ("cur_board_temp", c_float)]


class PowerInfo(ctypes.Structure):
    _fields_ = [("pwr_capability", c_float), ("cur_pwr_consumption", c_float)]


class EfmlError(RuntimeError):
    def __init__(self, function: str, code: int, index: int | None = None) -> None:
        self.function = function
        self.code = code
        at = f" for GCU {index}" if index is not None else ""
        super().__init__(
            f"Enflame EFML call {function}{at} failed with {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}); check the GCU with `efsmi` and the kernel "
            "log (dmesg)"
        )


_SIGNATURES: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "EfmlInit": (c_int, (c_bool,)),
    "EfmlShutdown": (None, ()),
    "EfmlGetDevCount": (c_int, (POINTER(c_uint32),)),
    "EfmlGetDevName": (c_int, (c_uint32, c_char_p)),
    "EfmlGetDevUuid": (c_int, (c_uint32, c_char_p)),
    "EfmlGetDevInfo": (c_int, (c_uint32, POINTER(DeviceInfo))),
    "EfmlGetDevMem": (c_int, (c_uint32, POINTER(MemInfo))),
    "EfmlGetDevIsHealth": (c_int, (c_uint32, POINTER(c_bool))),
    "EfmlGetDevDtuUsage": (c_int, (c_uint32, POINTER(c_float))),
    "EfmlGetDevTempV2": (c_int, (c_uint32, POINTER(ThermalInfo))),
    "EfmlGetDevPwr": (c_int, (c_uint32, POINTER(PowerInfo))),
}

STATE_KEY: Final = "efml"


@dataclass
class Efml:
    library: NativeLibrary
    fns: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def _ok(self, name: str, *args: Any, index: int | None = None) -> bool:
        code = int(self.fns[name](*args))
        if code == NOT_SUPPORTED:
            return False
        if code != SUCCESS:
            raise EfmlError(name, code, index)
        return True

    def _required(self, name: str, *args: Any, index: int | None = None) -> None:
        if not self._ok(name, *args, index=index):
            raise EfmlError(name, NOT_SUPPORTED, index)

    def count(self) -> int:
        value = c_uint32()
        self._required("EfmlGetDevCount", byref(value))
        return int(value.value)

    def _text(self, name: str, index: int) -> str:
        buf = ctypes.create_string_buffer(TEXT_BUFFER)
        if not self._ok(name, index, buf, index=index):
            return ""
        return buf.value.decode(errors="replace").strip()

    def name(self, index: int) -> str:
        return self._text("EfmlGetDevName", index)

    def uuid(self, index: int) -> str:
        return self._text("EfmlGetDevUuid", index)

    def info(self, index: int) -> DeviceInfo | None:
        info = DeviceInfo()
        return info if self._ok("EfmlGetDevInfo", index, byref(info), index=index) else None

    def memory(self, index: int) -> MemInfo:
        mem = MemInfo()
        self._required("EfmlGetDevMem", index, byref(mem), index=index)
        return mem

    def healthy(self, index: int) -> bool | None:
        value = c_bool()
        ok = self._ok("EfmlGetDevIsHealth", index, byref(value), index=index)
        return bool(value.value) if ok else None

    def usage(self, index: int) -> float | None:
        value = c_float()
        ok = self._ok("EfmlGetDevDtuUsage", index, byref(value), index=index)
        return float(value.value) if ok else None

    def temperature(self, index: int) -> float | None:
        value = ThermalInfo()
        ok = self._ok("EfmlGetDevTempV2", index, byref(value), index=index)
        return float(value.cur_asic_temp) if ok else None

    def power_w(self, index: int) -> float | None:
        value = PowerInfo()
        ok = self._ok("EfmlGetDevPwr", index, byref(value), index=index)
        return float(value.cur_pwr_consumption) if ok else None

    def shutdown(self) -> None:
        self.fns["EfmlShutdown"]()


def open_efml(ctx: NodeContext, config: EnflameConfig) -> Efml:
    paths = loading.candidates(config, SONAMES, config.library_dirs)
    library = loading.open_library(ctx, ctx.vendor, paths)
    efml = Efml(library=library)
    for name, (restype, argtypes) in _SIGNATURES.items():
        efml.fns[name] = library.function(name, restype, argtypes)
    # no_driver=False: the node agent needs the driver's devices, not only the library.
    code = int(efml.fns["EfmlInit"](False))
    if code != SUCCESS:
        raise VendorUnavailable(
            ctx.vendor,
            f"{library.path} loaded, but EfmlInit returned {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}): the Enflame driver (enflame.ko) is not "
            "loaded, or this container cannot open the GCUs' /dev nodes. Check `efsmi` on the "
            "node.",
        )
    ctx.state[STATE_KEY] = efml
    return efml


def state(ctx: NodeContext) -> Efml:
    efml = ctx.state.get(STATE_KEY)
    if not isinstance(efml, Efml):
        raise VendorUnavailable(ctx.vendor, "EFML is not initialised: xpushare_startup did not run")
    return efml

"""A ctypes binding of MXSML (``libmxsml.so``), MetaX's management library.

Why ctypes: MetaX's own Python binding (pymxsml) is not on PyPI; it ships inside the MetaX
SDK (python-ecosystem.md §3.3). Functions address a GPU by its index; structs and enums are
those of MXSML's header as pymxsml declares them. Units (as MetaX's tools convert them):
memory in KiB, temperature in hundredths of a degree.

Assumption: board power (``mxSmlGetBoardPowerInfo``) is in milliwatts per power way.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char, c_int, c_long, c_uint
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare_others.common import loading
from xpushare_others.metax.config import VENDOR, MetaxConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.native import NativeLibrary, NodeContext

SONAMES: Final = ("libmxsml.so",)

SUCCESS: Final = 0
NOT_SUPPORTED: Final = 3
RETURN_NAMES: Final = {
    1: "MXSML_Failure",
    2: "MXSML_NoDevice",
    3: "MXSML_OperationNotSupport",
    4: "MXSML_SysfsError",
    6: "MXSML_InvalidDeviceId",
    8: "MXSML_PermissionDenied",
    21: "MXSML_OpenDeviceFileFailure",
    26: "MXSML_LoadDllFailure",
}
#: mxSmlDeviceVirtualizationMode_t: a virtual function is a guest's view of a GPU, not a GPU
#: of this node (GPUStack skips SR-IOV VFs, gpustack-devices.md §1.4).
MODE_VF: Final = 2
#: mxSmlUsageIp_t MXSML_Usage_Xcore: the compute cores of C-class GPUs.
USAGE_XCORE: Final = 4
#: mxSmlTemperatureSensors_t MXSML_Temperature_Hotspot.
TEMPERATURE_HOTSPOT: Final = 0
#: Power ways read at once; MetaX boards report up to 3.
MAX_POWER_WAYS: Final = 3


class DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("deviceId", c_uint),
        ("type", c_uint),
        ("bdfId", c_char * 32),
        ("gpuId", c_uint),
        ("nodeId", c_uint),
        ("uuid", c_char * 96),
        ("brand", c_uint),
        ("mode", c_uint),
        ("deviceName", c_char * 32),
    ]


class MemoryInfo(ctypes.Structure):
    _fields_ = [
        ("visVramTotal", c_long),
        ("visVramUse", c_long),
        ("vramTotal", c_long),
        ("vramUse", c_long),
        ("xttTotal", c_long),
        ("xttUse", c_long),
    ]


class EccErrorCount(ctypes.Structure):
    _fields_ = [
        ("sramCE", c_uint),
        ("sramUE", c_uint),
        ("dramCE", c_uint),
        ("dramUE", c_uint),
        ("retiredPage", c_uint),
    ]


class PowerWay(ctypes.Structure):
    """mxSmlBoardWayElectricInfo_t."""

    _fields_ = [("voltage", c_uint), ("current", c_uint), ("power", c_uint)]


class MxsmlError(RuntimeError):
    def __init__(self, function: str, code: int, index: int | None = None) -> None:
        self.function = function
        self.code = code
        at = f" for GPU {index}" if index is not None else ""
        super().__init__(
            f"MetaX MXSML call {function}{at} failed with {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}); check the GPU with `mx-smi` and the kernel "
            "log (dmesg)"
        )


_SIGNATURES: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "mxSmlInit": (c_uint, ()),
    "mxSmlGetDeviceCount": (c_uint, ()),
    "mxSmlGetDeviceInfo": (c_uint, (c_uint, POINTER(DeviceInfo))),
    "mxSmlGetMemoryInfo": (c_uint, (c_uint, POINTER(MemoryInfo))),
    "mxSmlGetTotalEccErrors": (c_uint, (c_uint, POINTER(EccErrorCount))),
    "mxSmlGetDeviceIpUsage": (c_uint, (c_uint, c_uint, POINTER(c_int))),
    "mxSmlGetTemperatureInfo": (c_uint, (c_uint, c_uint, POINTER(c_int))),
    "mxSmlGetBoardPowerInfo": (c_uint, (c_uint, POINTER(c_uint), POINTER(PowerWay))),
}

STATE_KEY: Final = "mxsml"


@dataclass
class Mxsml:
    library: NativeLibrary
    fns: dict[str, Callable[..., int]] = field(default_factory=dict)

    def call(self, name: str, *args: Any, index: int | None = None) -> None:
        code = self.fns[name](*args)
        if code != SUCCESS:
            raise MxsmlError(name, code, index)

    def optional(self, name: str, *args: Any, index: int | None = None) -> bool:
        code = self.fns[name](*args)
        if code == NOT_SUPPORTED:
            return False
        if code != SUCCESS:
            raise MxsmlError(name, code, index)
        return True

    def count(self) -> int:
        return int(self.fns["mxSmlGetDeviceCount"]())

    def info(self, index: int) -> DeviceInfo:
        info = DeviceInfo()
        self.call("mxSmlGetDeviceInfo", index, byref(info), index=index)
        return info

    def memory(self, index: int) -> MemoryInfo:
        mem = MemoryInfo()
        self.call("mxSmlGetMemoryInfo", index, byref(mem), index=index)
        return mem

    def dram_ue(self, index: int) -> int | None:
        ecc = EccErrorCount()
        ok = self.optional("mxSmlGetTotalEccErrors", index, byref(ecc), index=index)
        return ecc.dramUE if ok else None

    def usage(self, index: int) -> int | None:
        value = c_int()
        ok = self.optional("mxSmlGetDeviceIpUsage", index, USAGE_XCORE, byref(value), index=index)
        return value.value if ok else None

    def temperature(self, index: int) -> int | None:
        value = c_int()
        ok = self.optional(
            "mxSmlGetTemperatureInfo", index, TEMPERATURE_HOTSPOT, byref(value), index=index
        )
        return value.value if ok else None

    def power_mw(self, index: int) -> int | None:
        ways = (PowerWay * MAX_POWER_WAYS)()
        size = c_uint(MAX_POWER_WAYS)
        ok = self.optional("mxSmlGetBoardPowerInfo", index, byref(size), ways, index=index)
        if not ok:
            return None
        return sum(int(ways[i].power) for i in range(min(size.value, MAX_POWER_WAYS)))


def open_mxsml(ctx: NodeContext, config: MetaxConfig) -> Mxsml:
    paths = loading.candidates(config, SONAMES, config.library_dirs)
    library = loading.open_library(ctx, VENDOR, paths)
    mxsml = Mxsml(library=library)
    for name, (restype, argtypes) in _SIGNATURES.items():
        mxsml.fns[name] = library.function(name, restype, argtypes)
    code = mxsml.fns["mxSmlInit"]()
    if code != SUCCESS:
        raise VendorUnavailable(
            VENDOR,
            f"{library.path} loaded, but mxSmlInit returned {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}): the MetaX driver is not loaded, or this "
            "container cannot open /dev/mxcd. Check `mx-smi` on the node.",
        )
    ctx.state[STATE_KEY] = mxsml
    return mxsml


def close_mxsml(ctx: NodeContext) -> None:
    # MXSML has no shutdown call; the library stays mapped for the process.
    ctx.state.pop(STATE_KEY, None)


def state(ctx: NodeContext) -> Mxsml:
    mxsml = ctx.state.get(STATE_KEY)
    if not isinstance(mxsml, Mxsml):
        raise VendorUnavailable(VENDOR, "MXSML is not initialised: xpushare_startup did not run")
    return mxsml

"""A ctypes binding of VAML (``libvaml.so``), Vastai's management library.

Why ctypes: Vastai ships VAML's Python wrapper only inside its VastStream SDK (a pybind11
module, not on PyPI). The C API used here is VAML 1.0's (its API reference): cards are
``vamlDeviceHandle`` integers, each card has dies (``vamlDieHandle`` integers), and a die
reports its memory and its utilisation in ten-thousandths. VAML has no per-device UUID, PCI
or health call in that API, so identities come from card and die indices (see
:mod:`xpushare_others.vastai.detect`).
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_int, c_uint, c_ulonglong
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare_others.common import loading
from xpushare_others.vastai.config import VENDOR, VastaiConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.native import NativeLibrary, NodeContext

SONAMES: Final = ("libvaml.so",)

SUCCESS: Final = 0
#: vamlOpStatus_t names (VAML 1.0 API reference).
RETURN_NAMES: Final = {
    1: "INVALID_ARGUMENT",
    2: "NOT_INITIALIZED",
    3: "NO_PERMISSION",
    4: "NOT_FOUND",
    5: "UNKNOWN",
}
#: vamlGetVersion takes no length: a buffer far above any version string it writes.
VERSION_BUFFER: Final = 1024
#: Utilisation is reported in ten-thousandths (10000 = 100 %).
UTILIZATION_SCALE: Final = 10000


class DieMemory(ctypes.Structure):
    """vamlDieMemory_struct, bytes."""

    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class DieUtilizeTotal(ctypes.Structure):
    """vamlDieUtilizeTotal_struct, ten-thousandths."""

    _fields_ = [("vdsp", c_int), ("vemcu", c_int), ("vdmcu", c_int)]


class VamlError(RuntimeError):
    def __init__(self, function: str, code: int, where: str = "") -> None:
        self.function = function
        self.code = code
        at = f" for {where}" if where else ""
        super().__init__(
            f"Vastai VAML call {function}{at} failed with {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}); check the card with `vasmi` and the "
            "kernel log (dmesg)"
        )


_REQUIRED: Final[dict[str, tuple[Any, ...]]] = {
    "vamlInit": (),
    "vamlShutDown": (),
    "vamlDeviceGetCount": (POINTER(c_uint),),
    "vamlDeviceGetHandleByIndex": (c_uint, POINTER(c_int)),
    "vamlDeviceGetDieCount": (c_int, POINTER(c_uint)),
    "vamlDieGetHandleByIndex": (c_int, c_uint, POINTER(c_int)),
    "vamlDeviceGetDieMemory": (c_int, POINTER(DieMemory)),
}
#: Calls an older or smaller VAML may lack; monitoring and the version skip them then.
_OPTIONAL: Final[dict[str, tuple[Any, ...]]] = {
    "vamlGetVersion": (ctypes.c_char_p,),
    "vamlDeviceGetDieUtilizeTotal": (c_int, POINTER(DieUtilizeTotal)),
}

STATE_KEY: Final = "vaml"


@dataclass
class Vaml:
    library: NativeLibrary
    fns: dict[str, Callable[..., int]] = field(default_factory=dict)
    version: str = ""

    def call(self, name: str, *args: Any, where: str = "") -> None:
        code = self.fns[name](*args)
        if code != SUCCESS:
            raise VamlError(name, code, where)

    def card_count(self) -> int:
        n = c_uint()
        self.call("vamlDeviceGetCount", byref(n))
        return n.value

    def card(self, index: int) -> int:
        h = c_int()
        self.call("vamlDeviceGetHandleByIndex", index, byref(h), where=f"card {index}")
        return h.value

    def die_count(self, card: int, index: int) -> int:
        n = c_uint()
        self.call("vamlDeviceGetDieCount", card, byref(n), where=f"card {index}")
        return n.value

    def die(self, card: int, index: int, where: str) -> int:
        h = c_int()
        self.call("vamlDieGetHandleByIndex", card, index, byref(h), where=where)
        return h.value

    def memory(self, die: int, where: str) -> DieMemory:
        mem = DieMemory()
        self.call("vamlDeviceGetDieMemory", die, byref(mem), where=where)
        return mem

    def utilization(self, die: int, where: str) -> float | None:
        """The die's AI (VDSP) utilisation in percent, or None where VAML lacks the call."""
        fn = self.fns.get("vamlDeviceGetDieUtilizeTotal")
        if fn is None:
            return None
        total = DieUtilizeTotal()
        code = fn(die, byref(total))
        if code != SUCCESS:
            raise VamlError("vamlDeviceGetDieUtilizeTotal", code, where)
        vdsp = int(total.vdsp)
        return max(0, min(vdsp, UTILIZATION_SCALE)) * 100 / UTILIZATION_SCALE


def open_vaml(ctx: NodeContext, config: VastaiConfig) -> Vaml:
    paths = loading.candidates(config, SONAMES, config.library_dirs)
    library = loading.open_library(ctx, VENDOR, paths)
    vaml = Vaml(library=library)
    for name, argtypes in _REQUIRED.items():
        vaml.fns[name] = library.function(name, c_int, argtypes)
    for name, argtypes in _OPTIONAL.items():
        if library.has(name):
            vaml.fns[name] = library.function(name, c_int, argtypes)
    code = vaml.fns["vamlInit"]()
    if code != SUCCESS:
        raise VendorUnavailable(
            VENDOR,
            f"{library.path} loaded, but vamlInit returned {code} "
            f"({RETURN_NAMES.get(code, 'unknown')}): the vastai_pci driver is not loaded, or "
            "this container cannot open the Vastai device nodes. Check `vasmi` on the node.",
        )
    if "vamlGetVersion" in vaml.fns:
        buf = ctypes.create_string_buffer(VERSION_BUFFER)
        if vaml.fns["vamlGetVersion"](buf) == SUCCESS:
            vaml.version = buf.value.decode(errors="replace").strip()
    ctx.state[STATE_KEY] = vaml
    return vaml


def close_vaml(ctx: NodeContext) -> None:
    vaml = ctx.state.pop(STATE_KEY, None)
    if isinstance(vaml, Vaml):
        vaml.fns["vamlShutDown"]()


def state(ctx: NodeContext) -> Vaml:
    vaml = ctx.state.get(STATE_KEY)
    if not isinstance(vaml, Vaml):
        raise VendorUnavailable(VENDOR, "VAML is not initialised: xpushare_startup did not run")
    return vaml

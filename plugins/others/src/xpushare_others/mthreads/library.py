"""Moore Threads' MTML through its official binding, ``pymtml`` (``mthreads-ml-py``).

Why not ``pymtml.mtmlLibraryInit()`` alone: the binding opens ``libmtml.so.2`` (then
``libmtml.so``) by bare soname on first use and reports a failure without saying where it
looked. So the library is opened here through the core's loader, on the vendor thread, with
every candidate and its ``dlerror`` recorded, and handed to pymtml before its init, the way
its own loader would have stored it (``pymtml.mtmlLib``). pymtml keeps the library, a cache
of function pointers and the library handle in module globals: one MTML per process, as the
driver expects. The binding is imported lazily, on the vendor thread, so a node without
Moore Threads never imports it at all.

Every C function the plugin's pymtml calls reach is listed in :data:`SYMBOLS` (read from the
installed wheel), which is what the tests' fake ``libmtml.so`` exports.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare_others.common import loading
from xpushare_others.mthreads.config import VENDOR, MthreadsConfig

if TYPE_CHECKING:
    from xpushare.native import NativeLibrary, NodeContext

log = logging.getLogger(__name__)

#: pymtml's own sonames, in its order.
SONAMES: Final = ("libmtml.so.2", "libmtml.so")

#: The C functions pymtml resolves for the calls this plugin makes.
SYMBOLS: Final = (
    "mtmlLibraryInit",
    "mtmlLibraryShutDown",
    "mtmlErrorString",
    "mtmlLibraryCountDevice",
    "mtmlLibraryInitDeviceByIndex",
    "mtmlLibraryFreeDevice",
    "mtmlLibraryInitSystem",
    "mtmlLibraryFreeSystem",
    "mtmlSystemGetDriverVersion",
    "mtmlDeviceGetProperty",
    "mtmlDeviceGetUUID",
    "mtmlDeviceGetName",
    "mtmlDeviceGetPciInfo",
    "mtmlDeviceCountGpuCores",
    "mtmlDeviceGetPowerUsage",
    "mtmlDeviceInitMemory",
    "mtmlDeviceFreeMemory",
    "mtmlMemoryGetTotal",
    "mtmlMemoryGetUsed",
    "mtmlMemoryGetEccErrorCounter",
    "mtmlDeviceInitGpu",
    "mtmlDeviceFreeGpu",
    "mtmlGpuGetUtilization",
    "mtmlGpuGetTemperature",
)

#: MTML return codes meaning "no usable Moore Threads driver here" (gpustack-devices.md §5.3).
_DRIVER_ABSENT: Final = {
    1: "the Moore Threads kernel driver is not loaded",
    2: "the driver failed",
    5: "no permission to open the GPU device nodes",
    9: "the driver is older than libmtml",
    10: "the driver is newer than libmtml",
}

STATE_KEY: Final = "mtml"


@dataclass
class Mtml:
    library: NativeLibrary
    api: ModuleType
    driver_version: str = ""

    @property
    def error(self) -> type[Exception]:
        cls: type[Exception] = self.api.MTMLError
        return cls

    def not_supported(self, exc: Exception) -> bool:
        return bool(getattr(exc, "value", None) == self.api.MTML_ERROR_NOT_SUPPORTED)


def _bind(api: ModuleType, library: NativeLibrary) -> None:
    """Make pymtml call into *library*, dropping function pointers of a library bound before."""
    with api.libLoadLock:
        # pymtml's loader would have stored its CDLL in this module global.
        vars(api)["mtmlLib"] = library.cdll
        api._mtmlGetFunctionPointer_cache.clear()


def open_mtml(ctx: NodeContext, config: MthreadsConfig) -> Mtml:
    paths = loading.candidates(config, SONAMES)
    library = loading.open_library(ctx, VENDOR, paths)
    try:
        api = importlib.import_module("pymtml")
    except Exception as exc:  # a broken binding must not take the node agent down
        raise VendorUnavailable(
            VENDOR, f"the pymtml binding (mthreads-ml-py) cannot be imported: {exc!r}"
        ) from exc
    _bind(api, library)
    try:
        api.mtmlLibraryInit()
    except api.MTMLError as exc:
        why = _DRIVER_ABSENT.get(exc.value, "libmtml refused to initialise")
        raise VendorUnavailable(
            VENDOR,
            f"{library.path} loaded, but mtmlLibraryInit failed with {exc.value} ({why}). "
            "Check `mthreads-gmi` on the node and that the node agent runs with the Moore "
            "Threads container runtime or the host's /dev.",
        ) from exc
    mtml = Mtml(library=library, api=api)
    try:
        system = api.mtmlLibraryInitSystem()
        try:
            raw = api.mtmlSystemGetDriverVersion(system)
            mtml.driver_version = raw.decode() if isinstance(raw, bytes) else str(raw)
        finally:
            api.mtmlLibraryFreeSystem(system)
    except api.MTMLError as exc:
        log.info("vendor mthreads: driver version not available: %s", exc)
    ctx.state[STATE_KEY] = mtml
    return mtml


def close_mtml(ctx: NodeContext) -> None:
    mtml = ctx.state.pop(STATE_KEY, None)
    if isinstance(mtml, Mtml):
        try:
            mtml.api.mtmlLibraryShutDown()
        except mtml.api.MTMLError as exc:
            log.warning("vendor mthreads: mtmlLibraryShutDown failed: %s", exc)


def state(ctx: NodeContext) -> Mtml:
    mtml = ctx.state.get(STATE_KEY)
    if not isinstance(mtml, Mtml):
        raise VendorUnavailable(VENDOR, "MTML is not initialised: xpushare_startup did not run")
    return mtml


def call_optional(mtml: Mtml, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, or None when the GPU does not support the reading."""
    try:
        return fn(*args)
    except mtml.error as exc:
        if mtml.not_supported(exc):
            return None
        raise

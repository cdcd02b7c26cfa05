"""Loading NVML on the vendor's library thread and handing it to pynvml.

Why not just ``pynvml.nvmlInit()``: pynvml opens ``libnvidia-ml.so.1`` by bare soname on its
first init and, when that fails, swallows the loader's message and raises "NVML Shared
Library Not Found". In a container the driver often lives under a mounted host root that
the loader does not search, and the operator needs to know which paths were tried and why
each failed. So the library is opened here, through the core's loader on the vendor thread
(every candidate and its ``dlerror`` recorded), and bound to pynvml before its init
(research/python-ecosystem.md §3.1).

pynvml keeps the library and a cache of function pointers in module globals: one NVML per
process, which is also how the driver works. Binding a different library object (a test
suite loading several fakes, a re-init from another path) must drop that cache, or calls
would go to functions of the previous library.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare.native import LibraryNotFound, candidate_paths
from xpushare_nvidia.lazy import pynvml

if TYPE_CHECKING:
    import ctypes

    from xpushare.native import NativeLibrary, NodeContext
    from xpushare_nvidia.config import NvidiaConfig

log = logging.getLogger(__name__)

VENDOR: Final = "nvidia"

#: NVML's file names, preferred first: the versioned soname the driver installs, then the
#: development link some distributions add (research/gpustack-devices.md §1.3).
SONAMES: Final[tuple[str, ...]] = ("libnvidia-ml.so.1", "libnvidia-ml.so")

#: NVML return codes that mean "this machine has no usable NVIDIA driver", as opposed to a
#: fault of one device (NVML API reference, nvmlReturn_t).
#: (By name: the bindings are read on first use, not at import, lazy.py.)
_DRIVER_ABSENT: Final = {
    "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (
        "libnvidia-ml and the kernel driver are different versions (driver upgraded "
        "without a reboot, or the wrong driver root mounted)"
    ),
    "NVML_ERROR_NO_PERMISSION": "no permission to open the NVIDIA device nodes",
    "NVML_ERROR_LIBRARY_NOT_FOUND": "NVML could not load its own dependencies",
}

#: Key of :class:`Nvml` in ``ctx.state``.
STATE_KEY: Final = "nvml"


#: Keys of what detection leaves in ``Nvml.extra`` for the other hooks (here, not in
#: detect.py, so allocate.py reads them without importing detection, which imports it).
INVENTORY_KEY: Final = "inventory"  # dict[int, Device]: the last detection, by NVML index
MIG_KEY: Final = "mig"  # dict[str, MigState]: MIG-mode GPUs by UUID
GEOMETRY_KEY: Final = "mig_geometry"  # dict[str, tuple[GiProfile, ...]]: dynamic MIG GPUs


@dataclass
class Nvml:
    """The loaded library and what the node-side hooks share between calls."""

    library: NativeLibrary
    driver_version: str = ""
    cuda_version: str = ""
    #: NVML device handles by GPU UUID, refreshed by every detection.
    handles: dict[str, Any] = field(default_factory=dict)
    #: Free-form per-module state (health watcher, MIG ownership, last inventory, ...);
    #: detection's keys are below.
    extra: dict[str, Any] = field(default_factory=dict)


def candidates(config: NvidiaConfig) -> list[str]:
    """The paths to try for NVML, best first: explicit path, driver roots, loader search."""
    paths = [config.library_path] if config.library_path else []
    for path in candidate_paths(SONAMES, roots=config.driver_roots):
        if "/" in path or config.search_loader_path:
            paths.append(path)
    return list(dict.fromkeys(paths))


def bind(cdll: ctypes.CDLL) -> None:
    """Make pynvml call into *cdll* (see the module docstring for why the cache goes)."""
    if pynvml.nvmlLib is cdll:
        return
    with pynvml.libLoadLock:
        pynvml.nvmlLib = cdll
        cache = getattr(pynvml, "_nvmlGetFunctionPointer_cache", None)
        if isinstance(cache, dict):
            cache.clear()


def open_nvml(ctx: NodeContext, config: NvidiaConfig) -> Nvml:
    """Load and initialise NVML on the vendor thread; ``VendorUnavailable`` says why not."""
    paths = candidates(config)
    try:
        library = ctx.load_library(paths)
    except LibraryNotFound as exc:
        raise VendorUnavailable(VENDOR, str(exc)) from exc
    bind(library.cdll)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        why = next(
            (v for k, v in _DRIVER_ABSENT.items() if getattr(pynvml, k) == exc.value),
            "NVML refused to initialise",
        )
        raise VendorUnavailable(
            VENDOR,
            f"{library.path} loaded, but nvmlInit failed: {exc} ({why}). Check that the "
            "NVIDIA driver is installed and loaded on this node (nvidia-smi), and that the "
            "configured driver root is the one the kernel module belongs to.",
        ) from exc
    nvml = Nvml(library=library)
    nvml.driver_version = _safe(pynvml.nvmlSystemGetDriverVersion, "")
    cuda = _safe(pynvml.nvmlSystemGetCudaDriverVersion, 0)
    if cuda:
        # NVML encodes CUDA 12.4 as 12040 (major * 1000 + minor * 10).
        nvml.cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
    if library.attempts:
        log.info(
            "vendor nvidia: NVML loaded from %s after %d other candidate(s)",
            library.path,
            len(library.attempts),
        )
    ctx.state[STATE_KEY] = nvml
    return nvml


def close_nvml(ctx: NodeContext) -> None:
    """Shut NVML down once (the library stays mapped: pynvml and the driver expect that).

    Free what belongs to the NVML session (the health event set) before calling this.
    """
    if ctx.state.pop(STATE_KEY, None) is None:
        return
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        log.warning("vendor nvidia: nvmlShutdown failed: %s", exc)


def state(ctx: NodeContext) -> Nvml:
    """The loaded NVML of this vendor; a hook called before startup is a host bug."""
    nvml = ctx.state.get(STATE_KEY)
    if not isinstance(nvml, Nvml):
        raise VendorUnavailable(
            VENDOR, "NVML is not initialised: xpushare_startup did not run or failed"
        )
    return nvml


def _safe(fn: Any, default: Any) -> Any:
    try:
        return fn()
    except pynvml.NVMLError:
        return default

"""Loading a vendor's management library on its library thread, or saying why not.

Why a helper: every vendor here searches the same places (an explicit path, the host's root
mounted into the container, the vendor's install directories, the loader's own search) and
must turn "not found" into an inactive vendor whose reason lists every path tried.

Two of these libraries reuse other vendors' symbol names (Hygon's ROCm SMI build exports
AMD's ``rsmi_*``; Iluvatar's IXML exports NVIDIA's ``nvml*``). They are loaded with
:data:`ISOLATED_MODE`: ``RTLD_LOCAL`` keeps their symbols out of the process's global scope,
so they cannot satisfy another library's lookups, and ``RTLD_DEEPBIND`` makes the library's
own calls between its functions bind to itself even when a library with the same names was
loaded globally first (GPUStack loads AMD SMI with RTLD_DEEPBIND for this reason,
research/gpustack-devices.md §5.2).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from xpushare.errors import VendorUnavailable
from xpushare.native import DEFAULT_DLOPEN_MODE, LibraryNotFound, candidate_paths

if TYPE_CHECKING:
    from xpushare.native import NativeLibrary, NodeContext
    from xpushare_others.common.settings import VendorConfig

#: dlopen flags for a library whose symbol names another vendor's library also exports.
ISOLATED_MODE: Final[int] = DEFAULT_DLOPEN_MODE | os.RTLD_DEEPBIND


def candidates(
    config: VendorConfig, sonames: Sequence[str], vendor_dirs: Sequence[str] = ()
) -> list[str]:
    """Paths to try, best first: explicit path, driver roots, vendor directories, loader."""
    paths = [config.library_path] if config.library_path else []
    if config.driver_roots:
        under = candidate_paths(sonames, roots=config.driver_roots, extra_dirs=vendor_dirs)
        paths += [p for p in under if "/" in p]
    for path in candidate_paths(sonames, extra_dirs=vendor_dirs):
        if "/" in path or config.search_loader_path:
            paths.append(path)
    return list(dict.fromkeys(paths))


def open_library(
    ctx: NodeContext, vendor: str, paths: Sequence[str], *, isolated: bool = False
) -> NativeLibrary:
    """Load the first of *paths* on the vendor thread; ``VendorUnavailable`` lists each try."""
    try:
        return ctx.load_library(paths, mode=ISOLATED_MODE if isolated else DEFAULT_DLOPEN_MODE)
    except LibraryNotFound as exc:
        raise VendorUnavailable(vendor, str(exc)) from exc

"""Load ROCm's ``libamd_smi.so`` and the ``amdsmi`` Python wrapper on the vendor thread.

Why this module is careful:

* ``import amdsmi`` loads ``libamd_smi.so`` *at import* and binds every C function it knows by
  name; without the library it prints to stdout and dies with ``KeyError``, with an older one
  it dies with ``AttributeError`` (research/python-ecosystem.md §3.2). So it is imported
  lazily, here, on the vendor's library thread, and every failure becomes
  :class:`~xpushare.errors.VendorUnavailable` with the reason and what to do.
* The library is first loaded through the core loader (:meth:`NodeContext.load_library`), which
  tries each candidate path on this thread and reports every one with the dynamic loader's own
  words, so "library not found" lists exactly where it looked. The wrapper is then pointed at
  that very file: it tries ``$ROCM_HOME/lib/libamd_smi.so`` first, so ``ROCM_HOME`` is set to
  a directory whose ``lib/libamd_smi.so`` is the loaded file for the length of the import.
  ``dlopen`` of a file already loaded returns the same handle, so one copy of the library
  serves both. (``os.environ`` is process-wide: the change lasts only for the import and is
  serialised by a lock; nothing else in xpushare reads ``ROCM_HOME``.)
* Each start imports a **private instance** of the wrapper (a fresh module object under this
  package's name, built from the installed ``amdsmi`` files), bound to the library that start
  chose. A process-wide ``import amdsmi`` would stay bound to whichever library the first
  import found, forever; a private instance lets a restart after a driver install, or a second
  host in one process (the tests), bind to the right file.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import itertools
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare.native import STANDARD_LIBRARY_DIRS, LibraryNotFound
from xpushare_amd.config import (
    DEFAULT_ROCM_ROOT,
    LIBRARY_DIR_ENV,
    LIBRARY_NAME,
    ROCM_ENV,
    VENDOR,
    AmdConfig,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from types import ModuleType

    from xpushare.native import NativeLibrary, NodeContext

log = logging.getLogger(__name__)

#: RTLD_DEEPBIND: libamd_smi bundles copies of libraries (libdrm, ...) that must not bind to
#: other versions already in the process; GPUStack loads it so for that reason
#: (research/gpustack-devices.md §5.2). RTLD_NOW and RTLD_LOCAL as the core loader's default.
DLOPEN_MODE: Final = os.RTLD_NOW | os.RTLD_LOCAL | os.RTLD_DEEPBIND

#: amdsmi status codes whose meaning calls for specific advice (amdsmi.h, amdsmi_status_t).
_STATUS_NO_PERM: Final = 10
_STATUS_DRIVER_NOT_LOADED: Final = 34
_STATUS_NOT_FOUND: Final = 31
_STATUS_INIT_ERROR: Final = 18

_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_NO_FILE = "No such file or directory"

_import_lock = threading.Lock()
_instances = itertools.count()


@dataclass
class Smi:
    """A started AMD SMI: the private ``amdsmi`` module and the library it is bound to.

    ``api`` is the ``amdsmi`` package (untyped: call its functions as documented by AMD);
    every call must be made on the vendor's library thread.
    """

    api: ModuleType
    library: NativeLibrary
    wrapper_version: str

    @property
    def error(self) -> type[Exception]:
        """The wrapper's base exception (``AmdSmiException``)."""
        cls: type[Exception] = self.api.AmdSmiException
        return cls

    def status(self, exc: BaseException) -> str:
        """A short form of an amdsmi failure: ``AMDSMI_STATUS_NOT_SUPPORTED`` and the like."""
        info = getattr(exc, "get_error_info", None)
        if callable(info):
            return str(info(detailed=False))
        return f"{type(exc).__name__}: {exc}"

    def optional(self, fn: str, *args: Any) -> Any:
        """``api.<fn>(*args)``, or ``None`` when the library cannot answer (not supported,
        no permission, ...): a figure that cannot be read is absent, never zero."""
        try:
            return getattr(self.api, fn)(*args)
        except self.error as exc:
            log.debug("vendor %s: %s failed: %s", VENDOR, fn, self.status(exc))
            return None


def library_candidates(config: AmdConfig, environ: Mapping[str, str]) -> list[str]:
    """Every path to try for ``libamd_smi.so``, best first, all absolute.

    Order: the vendor option ``library_path`` (a file, or a directory holding it);
    ``$AMD_SMI_LIB_PATH``; ``$ROCM_HOME/lib`` and ``$ROCM_PATH/lib`` (as the wrapper reads them);
    each of the option ``rocm_roots``; ``/opt/rocm/lib``; each ``LD_LIBRARY_PATH`` entry; the
    standard library directories. Only absolute paths, so the error can say where it looked.
    """
    found: list[Path] = []
    if config.library_path:
        path = Path(config.library_path)
        is_file = path.is_file() or path.name.endswith(".so") or ".so." in path.name
        found.append(path if is_file else path / LIBRARY_NAME)
    lib_dir = environ.get(LIBRARY_DIR_ENV)
    if lib_dir:
        found.append(Path(lib_dir) / LIBRARY_NAME)
    roots = [environ[v] for v in ROCM_ENV if environ.get(v)]
    roots += config.rocm_roots
    roots.append(DEFAULT_ROCM_ROOT)
    found += [Path(root) / "lib" / LIBRARY_NAME for root in roots]
    found += [Path(d) / LIBRARY_NAME for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    found += [Path("/", d, LIBRARY_NAME) for d in STANDARD_LIBRARY_DIRS]
    return list(dict.fromkeys(str(p) for p in found if p.is_absolute()))


def not_found_reason(exc: LibraryNotFound) -> str:
    """Why the library could not be loaded, short enough to read in ``xpushare detect``."""
    absent = [a.path for a in exc.attempts if _NO_FILE in a.error]
    failed = [a for a in exc.attempts if _NO_FILE not in a.error]
    lines = [f"{LIBRARY_NAME} (ROCm's AMD SMI library) could not be loaded."]
    for attempt in failed:
        lines.append(f"  {attempt.path}: {attempt.error}")
    if absent:
        lines.append(f"  not present: {', '.join(absent)}")
    lines.append(
        "Install ROCm's amd-smi-lib on the node and mount its ROCm directory into the node "
        "agent, or set the amd vendor option 'library_path' (or ROCM_PATH) to "
        "where libamd_smi.so is."
    )
    return "\n".join(lines)


@contextlib.contextmanager
def _rocm_home_for(library: Path) -> Iterator[None]:
    """Make the wrapper's first choice, ``$ROCM_HOME/lib/libamd_smi.so``, be *library*."""
    scratch: str | None = None
    if library.name == LIBRARY_NAME and library.parent.name == "lib":
        home = library.parent.parent
    else:
        scratch = tempfile.mkdtemp(prefix="xpushare-amd-")
        (Path(scratch) / "lib").mkdir()
        (Path(scratch) / "lib" / LIBRARY_NAME).symlink_to(library.resolve())
        home = Path(scratch)
    saved = os.environ.get("ROCM_HOME")
    os.environ["ROCM_HOME"] = str(home)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("ROCM_HOME", None)
        else:
            os.environ["ROCM_HOME"] = saved
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def wrapper_version() -> str:
    try:
        return importlib.metadata.version("amdsmi")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def import_amdsmi(library: NativeLibrary) -> ModuleType:
    """A private instance of the installed ``amdsmi`` package, bound to *library*'s file.

    :raises VendorUnavailable: the package is missing, or it cannot bind to the library
        (a function it needs is missing, ...), with what to do.
    """
    version = wrapper_version()
    spec = importlib.util.find_spec("amdsmi")
    if spec is None or spec.origin is None or not spec.submodule_search_locations:
        raise VendorUnavailable(
            VENDOR,
            "the amdsmi Python package is not installed next to xpushare-amd; reinstall "
            "xpushare-amd (it depends on amdsmi) or `pip install 'amdsmi>=7.0.2,<7.1'`",
        )
    name = f"{__package__}._amdsmi_{next(_instances)}"
    private = importlib.util.spec_from_file_location(
        name, spec.origin, submodule_search_locations=list(spec.submodule_search_locations)
    )
    if private is None or private.loader is None:  # pragma: no cover - a broken install
        raise VendorUnavailable(VENDOR, f"cannot read the amdsmi package at {spec.origin}")
    module = importlib.util.module_from_spec(private)
    path = Path(library.path)
    with _import_lock, _rocm_home_for(path):
        sys.modules[name] = module
        try:
            private.loader.exec_module(module)
        except AttributeError as exc:
            symbol = _UNDEFINED.search(str(exc))
            missing = symbol.group(1) if symbol else str(exc)
            raise VendorUnavailable(
                VENDOR,
                f"{library.path} lacks the function {missing}, which the amdsmi {version} "
                "Python package needs: the node's ROCm is older than (or differs from) "
                "ROCm 7.0. Install ROCm 7.0's amd-smi-lib on the node, or set the amd vendor "
                "option 'library_path' to a libamd_smi.so from ROCm 7.0",
            ) from exc
        except Exception as exc:
            raise VendorUnavailable(
                VENDOR,
                f"the amdsmi {version} Python package could not bind to {library.path}: "
                f"{type(exc).__name__}: {exc}",
            ) from exc
        finally:
            for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
                del sys.modules[key]
        # Checked while the ROCM_HOME link (if any) still exists.
        bound = getattr(module.amdsmi_wrapper, "location", None)
        if bound is None or not Path(str(bound)).resolve().samefile(path):
            raise VendorUnavailable(
                VENDOR, f"the amdsmi package bound to {bound} instead of {library.path}"
            )
    return module


def _init_reason(smi_status: int | None, detail: str, path: str) -> str:
    what = f"amdsmi_init failed in {path} ({detail})"
    if smi_status == _STATUS_DRIVER_NOT_LOADED:
        return f"{what}: the amdgpu kernel driver is not loaded on this node (check dmesg)"
    if smi_status == _STATUS_NO_PERM:
        return (
            f"{what}: the node agent may not open /dev/kfd and /dev/dri; run it privileged "
            "or give it those device nodes"
        )
    if smi_status == _STATUS_NOT_FOUND:
        return f"{what}: no AMD GPU was found"
    if smi_status == _STATUS_INIT_ERROR:
        return f"{what}: check that the ROCm user space matches the amdgpu driver"
    return what


def start(ctx: NodeContext, config: AmdConfig) -> Smi:
    """Load the library, import the wrapper bound to it, and ``amdsmi_init`` for GPUs.

    Runs on the vendor's library thread (``xpushare_startup``).

    :raises VendorUnavailable: anything that stops the vendor here, with what to do.
    """
    try:
        library = ctx.load_library(library_candidates(config, os.environ), mode=DLOPEN_MODE)
    except LibraryNotFound as exc:
        raise VendorUnavailable(VENDOR, not_found_reason(exc)) from exc
    api = import_amdsmi(library)
    smi = Smi(api=api, library=library, wrapper_version=wrapper_version())
    try:
        api.amdsmi_init(api.AmdSmiInitFlags.INIT_AMD_GPUS)
    except smi.error as exc:
        code = getattr(exc, "err_code", None)
        raise VendorUnavailable(
            VENDOR,
            _init_reason(code if isinstance(code, int) else None, smi.status(exc), library.path),
        ) from exc
    return smi


def stop(smi: Smi) -> None:
    """``amdsmi_shut_down``; a failure is logged (the process is stopping anyway)."""
    try:
        smi.api.amdsmi_shut_down()
    except smi.error as exc:
        log.warning("vendor %s: amdsmi_shut_down failed: %s", VENDOR, smi.status(exc))

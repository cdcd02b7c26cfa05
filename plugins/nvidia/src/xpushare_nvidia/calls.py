"""How the plugin tells NVML's answers apart: a value, "not on this GPU", or "GPU lost".

Why one place: every query of a detection or a sample can fail for three different reasons
that call for different actions. *Not supported* (a PCIe GPU asked for NVLinks, a MIG-mode
GPU asked for utilization) is a fact about the hardware: the value is absent, nothing is
wrong. *GPU lost* (fallen off the bus, reset required) makes the device unhealthy and must
never crash detection or monitoring. Anything else is an error of that one query, logged and
reported as absent ("could not measure", never zero).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from xpushare_nvidia.lazy import pynvml

log = logging.getLogger(__name__)
T = TypeVar("T")

# The code sets below are read from the bindings when first needed, not at import
# (lazy.py): a process that never calls NVML never imports them.


@functools.cache
def lost_codes() -> frozenset[int]:
    """Codes after which a device cannot be used until it is reset or re-seated."""
    return frozenset(
        {
            pynvml.NVML_ERROR_GPU_IS_LOST,
            pynvml.NVML_ERROR_RESET_REQUIRED,
            getattr(pynvml, "NVML_ERROR_GPU_NOT_FOUND", 28),
        }
    )


@functools.cache
def unsupported_codes() -> frozenset[int]:
    """Codes that mean "this query does not apply here": absent, not an error."""
    return frozenset(
        {
            pynvml.NVML_ERROR_NOT_SUPPORTED,
            pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            pynvml.NVML_ERROR_NOT_FOUND,
        }
    )


@functools.cache
def mismatch() -> tuple[type[BaseException], ...]:
    """What pynvml raises, instead of an NVMLError, when the symbol its unversioned wrapper
    names is missing (``nvmlDeviceGetComputeRunningProcesses`` on an R470 driver, which has
    ``_v2`` but not ``_v3``): not an NVMLError, so it must be named to be caught."""
    found = getattr(pynvml, "NVMLLibraryMismatchError", None)
    return (found,) if isinstance(found, type) else ()


#: Calls whose symbol the loaded driver lacks, reported once each (a driver does not grow
#: symbols while the agent runs, and a sample every few seconds would repeat it forever).
_missing: set[str] = set()


def absent(what: str, exc: BaseException) -> None:
    if what not in _missing:
        _missing.add(what)
        log.info("vendor nvidia: this driver has no %s (%s); that reading is left out", what, exc)


def is_missing(exc: BaseException) -> bool:
    """The driver lacks the symbol (an older driver): fall back, or leave the field out."""
    if isinstance(exc, mismatch()):
        return True
    return isinstance(exc, pynvml.NVMLError) and exc.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND


def is_lost(exc: BaseException) -> bool:
    return isinstance(exc, pynvml.NVMLError) and exc.value in lost_codes()


def optional(what: str, fn: Callable[..., T], *args: object) -> T | None:
    """``fn(*args)``, or ``None`` when NVML cannot answer; a lost GPU still raises."""
    try:
        return fn(*args)
    except mismatch() as exc:
        absent(what, exc)
        return None
    except pynvml.NVMLError as exc:
        if exc.value in lost_codes():
            raise
        if exc.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            absent(what, exc)
            return None
        if exc.value not in unsupported_codes():
            log.warning("vendor nvidia: %s failed: %s", what, exc)
        return None
    except UnicodeDecodeError as exc:
        # pynvml decodes C strings itself; a driver answer that is not text is absent.
        log.warning("vendor nvidia: %s returned undecodable text: %s", what, exc)
        return None


def newest(what: str, variants: Sequence[tuple[str, Callable[..., T]]], *args: object) -> T | None:
    """The first of *variants* (newest first) the driver has, called as :func:`optional`;
    ``None`` when none answers. *what* names the call in logs."""
    for name, fn in variants:
        try:
            return fn(*args)
        except mismatch() as exc:
            absent(name, exc)
        except pynvml.NVMLError as exc:
            if not is_missing(exc):
                return optional(what, _raise, exc)
            absent(name, exc)
        except UnicodeDecodeError as exc:
            log.warning("vendor nvidia: %s returned undecodable text: %s", what, exc)
            return None
    return None


def _raise(exc: BaseException) -> Any:
    raise exc


def running_processes(handle: object) -> list[Any] | None:
    """Compute processes on *handle*: ``_v3`` (R510+), else ``_v2`` (R470), else unknown."""
    variants: list[tuple[str, Callable[..., list[Any]]]] = [
        (name, getattr(pynvml, name))
        for name in (
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetComputeRunningProcesses_v2",
        )
        if hasattr(pynvml, name)
    ]
    return newest("nvmlDeviceGetComputeRunningProcesses", variants, handle)


def text(value: str | bytes) -> str:
    """pynvml returns C character arrays in structures as bytes; names as str."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00").strip()
    return value.strip()


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:3B:00.0`` (NVML) → ``0000:3b:00.0`` (sysfs, lspci, kubelet)."""
    value = bus_id.strip().lower()
    domain, sep, rest = value.partition(":")
    if not sep or not rest:
        return value
    return f"{domain[-4:].rjust(4, '0')}:{rest}"

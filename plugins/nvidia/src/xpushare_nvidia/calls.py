"""How the plugin tells NVML's answers apart: a value, "not on this GPU", or "GPU lost".

Why one place: every query of a detection or a sample can fail for three different reasons
that call for different actions. *Not supported* (a PCIe GPU asked for NVLinks, a MIG-mode
GPU asked for utilization) is a fact about the hardware: the value is absent, nothing is
wrong. *GPU lost* (fallen off the bus, reset required) makes the device unhealthy and must
never crash detection or monitoring. Anything else is an error of that one query, logged and
reported as absent ("could not measure", never zero).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, TypeVar

import pynvml

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Codes after which a device cannot be used until it is reset or re-seated.
LOST_CODES: Final = frozenset(
    {
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_RESET_REQUIRED,
        getattr(pynvml, "NVML_ERROR_GPU_NOT_FOUND", 28),
    }
)

#: Codes that mean "this query does not apply here": absent, not an error.
UNSUPPORTED_CODES: Final = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NOT_FOUND,
    }
)


def is_lost(exc: BaseException) -> bool:
    return isinstance(exc, pynvml.NVMLError) and exc.value in LOST_CODES


def optional(what: str, fn: Callable[..., T], *args: object) -> T | None:
    """``fn(*args)``, or ``None`` when NVML cannot answer; a lost GPU still raises."""
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        if exc.value in LOST_CODES:
            raise
        if exc.value not in UNSUPPORTED_CODES:
            log.warning("vendor nvidia: %s failed: %s", what, exc)
        return None
    except UnicodeDecodeError as exc:
        # pynvml decodes C strings itself; a driver answer that is not text is absent.
        log.warning("vendor nvidia: %s returned undecodable text: %s", what, exc)
        return None


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

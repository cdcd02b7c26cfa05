"""Modes per GPU: which a GPU serves in, which a pod accepts, and switching without a drain.

Why per GPU and switched only when idle: a node can hold GPUs shared by HAMi-core, GPUs cut
into MIG instances on demand, and GPUs given whole, side by side (HAMi's
``operatingmode``, research/hami-protocol.md §9.3, per GPU here). Changing a GPU's mode
resets it (MIG on or off) or changes what Allocate gives, so the agent does it only when no
process runs on the GPU and no MIG instance it created for a pod remains; until then the
GPU keeps publishing its current mode, with the one it waits for in
``extra["mode_pending"]``, and the other GPUs of the node serve on. Nothing needs draining.

A pod picks modes with HAMi's ``nvidia.com/vgpu-mode`` annotation: a GPU fits when the name
of its mode is a substring of the value (HAMi's rule, §2.1), e.g. ``mig`` or ``hami-core``.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final

from xpushare.models import PodView
from xpushare_nvidia import dynamic
from xpushare_nvidia.calls import running_processes
from xpushare_nvidia.lazy import pynvml

log = logging.getLogger(__name__)

#: ``Device.mode`` values: the inventory's names (the core calls HAMi-core sharing "shared").
SHARED: Final = "shared"
MIG: Final = "mig"
EXCLUSIVE: Final = "exclusive"
#: HAMi's name of each mode, what ``nvidia.com/vgpu-mode`` and the configuration say.
HAMI_NAME: Final = {SHARED: "hami-core", MIG: "mig", EXCLUSIVE: "exclusive"}
#: The pod annotation, and the longest value read (HAMi's values are a few words).
VGPU_MODE_KEY: Final = "nvidia.com/vgpu-mode"
MAX_MODE_LENGTH: Final = 64


#: A pod's own choice of MIG profile (our annotation: HAMi picks by memory only).
PROFILE_KEY: Final = "xpushare.io/mig-profile"
# NVML's profile names: "<slices>g.<GB>gb", a compute-instance prefix, media suffixes.
_PROFILE_NAME: Final = re.compile(r"^(?:\d{1,2}c\.)?\d{1,2}g\.\d{1,4}gb(?:[+-][a-z]{1,8}){0,3}$")


def request_profile(pod: PodView) -> str | None:
    """The MIG profile the pod names; ``ValueError`` for a value that is no profile name."""
    raw = pod.annotations.get(PROFILE_KEY)
    if raw is None or not raw.strip():
        return None
    value = raw.strip().lower()
    if len(value) > MAX_MODE_LENGTH or not _PROFILE_NAME.match(value):
        raise ValueError(
            f"pod {pod.ref}: annotation {PROFILE_KEY}={raw[:MAX_MODE_LENGTH]!r} is not a MIG "
            "profile name such as 1g.10gb or 3g.40gb (nvidia-smi mig -lgip lists them)"
        )
    return value


def request_mode(pod: PodView) -> str | None:
    """The pod's ``nvidia.com/vgpu-mode``; ``ValueError`` for one no GPU could match."""
    raw = pod.annotations.get(VGPU_MODE_KEY)
    if raw is None:
        return None
    if len(raw) > MAX_MODE_LENGTH:
        raise ValueError(
            f"pod {pod.ref}: annotation {VGPU_MODE_KEY} is longer than {MAX_MODE_LENGTH} "
            "characters; give one of hami-core, mig, exclusive"
        )
    value = raw.strip()
    if not value:
        return None
    if not any(name in value for name in HAMI_NAME.values()):
        raise ValueError(
            f"pod {pod.ref}: annotation {VGPU_MODE_KEY}={value!r} names no mode a GPU can be "
            "in; give hami-core, mig or exclusive"
        )
    return value


def allows(request_mode: str | None, device_mode: str) -> bool:
    """HAMi's rule: the GPU's mode name is a substring of the pod's value."""
    if request_mode is None:
        return True
    return HAMI_NAME.get(device_mode, device_mode) in request_mode


def idle(handle: Any) -> bool:
    """No process runs on the GPU (its MIG devices included); unknown is not idle."""
    procs = running_processes(handle)
    return procs is not None and not procs


def switch_mig(handle: Any, gpu: str, enable: bool, held: list[str]) -> bool:
    """Turn MIG on or off on an idle GPU; ``False`` (nothing changed) when it is in use.

    *held* names the containers the MIG journal still lists on the GPU: their instances
    may be live, so the GPU is not touched. Turning MIG off destroys the GPU's (idle)
    instances first, as the driver requires.
    """
    if held:
        log.info(
            "vendor nvidia: GPU %s keeps its mode until these containers' MIG instances are "
            "released: %s",
            gpu,
            ", ".join(held[:5]),
        )
        return False
    if not idle(handle):
        return False
    if not enable and not dynamic.clear(handle, gpu, dynamic.read_profiles(handle)):
        return False
    mode = pynvml.NVML_DEVICE_MIG_ENABLE if enable else pynvml.NVML_DEVICE_MIG_DISABLE
    try:
        pynvml.nvmlDeviceSetMigMode(handle, mode)
    except pynvml.NVMLError as exc:
        log.warning(
            "vendor nvidia: GPU %s: MIG mode could not be turned %s (%s); retried at the next "
            "detection",
            gpu,
            "on" if enable else "off",
            exc,
        )
        return False
    log.info("vendor nvidia: GPU %s: MIG mode turned %s", gpu, "on" if enable else "off")
    return True

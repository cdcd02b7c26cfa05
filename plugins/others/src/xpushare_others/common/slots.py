"""Vendors whose devices are shared by slot count alone, and HAMi's "mutex" policy.

Why: HAMi's Vastai and Biren backends book no memory and no compute: a container takes one
slot of each device it gets (memory "100 %", cores 0, and ``Fit`` checks health, UUIDs and
``Count > Used`` only; research/hami-protocol.md §8.2). A request of these vendors is
therefore turned into one that books nothing but the slot (memory 0 MiB, compute 0), which
the core's fit and ledger then count exactly as HAMi does.

HAMi's ``hami.io/gpu-scheduler-policy`` annotation may name ``mutex`` among a comma list of
policies: the pod then takes only devices nobody uses (HAMi's ``PolicyContains``). Here that is
an exclusive request, which the core refuses on a used device (and which, stricter than HAMi,
also keeps later pods off the device it holds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from xpushare.models import ContainerRequest, Device, DeviceUsage, FitReason, PodView

#: HAMi's pod annotation naming the device policies of a pod (pkg/util/types.go).
POLICY_KEY: Final = "hami.io/gpu-scheduler-policy"
#: The policy under that key that asks for idle devices only.
MUTEX: Final = "mutex"
#: Longest policy list read: HAMi knows four policy names; anything longer is not a list of them.
MAX_POLICY_CHARS: Final = 256


def wants_mutex(pod: PodView) -> bool:
    """Whether the pod's HAMi policy list names ``mutex`` (bounded: the value is the user's)."""
    raw = pod.annotations.get(POLICY_KEY)
    if raw is None:
        return False
    if len(raw) > MAX_POLICY_CHARS:
        raise ValueError(
            f"pod {pod.ref}: annotation {POLICY_KEY} is {len(raw)} characters long, above "
            f"{MAX_POLICY_CHARS}; list HAMi policies such as 'mutex' or 'binpack,mutex'"
        )
    return any(part.strip() == MUTEX for part in raw.split(","))


def slot_request(request: ContainerRequest | None, pod: PodView) -> ContainerRequest | None:
    """*request* booking one slot per device and nothing else; exclusive under ``mutex``."""
    if request is None:
        return None
    return request.model_copy(
        update={
            "memory_mib": 0,
            "memory_percent": None,
            "compute_percent": 0,
            "exclusive": request.exclusive or wants_mutex(pod),
        }
    )


def _model_allowed(request: ContainerRequest, model: str) -> bool:
    upper = model.upper()
    if request.models_include and not any(m.upper() in upper for m in request.models_include):
        return False
    return not any(m.upper() in upper for m in request.models_exclude)


def check(
    request: ContainerRequest, device: Device, usage: Mapping[str, DeviceUsage]
) -> FitReason | None:
    """The first of HAMi's slot checks *device* fails for *request* (None: it can take it).

    The order is HAMi's ``Fit`` (health, type, UUID, slots, mutex), with the core's own rule
    for devices held exclusively, so each refused device is counted under one reason.
    """
    used = usage.get(device.id)
    used_slots = used.used_slots if used is not None else 0
    if not device.healthy:
        return FitReason.UNHEALTHY
    if not _model_allowed(request, device.model):
        return FitReason.MODEL_MISMATCH
    if request.uuids_include and device.id not in request.uuids_include:
        return FitReason.UUID_MISMATCH
    if device.id in request.uuids_exclude:
        return FitReason.UUID_MISMATCH
    if used_slots >= device.share_slots:
        return FitReason.SLOTS_EXHAUSTED
    if used is not None and used.exclusive:
        return FitReason.HELD_EXCLUSIVELY
    if request.exclusive and used_slots > 0:
        return FitReason.EXCLUSIVE_CONFLICT
    return None

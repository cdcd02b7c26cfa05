"""Whether a request fits a T-Head node with PPUs in MIG mode: which instance, where.

Why a fit of its own, and only there: a node without a PPU in MIG mode is the core's sharing
model (HGGC quota slices), so this answers ``None`` and the core's default decides. A PPU in
MIG mode is cut by the hardware and is never booked as a share: each slice of a container
gets a new instance, the profile the pod names (``xpushare.io/mig-profile``), or else the
smallest that holds the memory and compute asked for (a whole-PPU or exclusive request gets
the profile spanning the PPU), at the start that overlaps no booked instance and blocks the
fewest others. Which start that is is the core's geometry
(:func:`xpushare.scheduling.partitions.place_instances`), the one NVIDIA's dynamic MIG uses.
The node's PPUs not in MIG mode are tried first, by the core's default fit, as NVIDIA's fit
tries whole GPUs before MIG instances.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from xpushare.models import (
    ContainerRequest,
    Device,
    DeviceSlice,
    DeviceUsage,
    FitReason,
    FitResult,
    NodeView,
)
from xpushare.scheduling.hookfit import default_fit
from xpushare.scheduling.partitions import geometry_of, place_instances
from xpushare_others.common.fitting import UNUSED, allowed
from xpushare_others.thead.mig import MIG_MODE


def applies(devices: Sequence[Device]) -> bool:
    """Whether :func:`fit` may answer a request without a profile on these PPUs."""
    return any(d.mode == MIG_MODE for d in devices)


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
    memory_overcommit: float = 1.0,
) -> FitResult | None:
    split = [d for d in node.devices if d.mode == MIG_MODE]
    if not split:
        return None
    reasons: Counter[FitReason] = Counter()
    whole = tuple(d for d in node.devices if d.mode != MIG_MODE)
    if whole and request.partition is None:
        shared = node.model_copy(update={"devices": whole})
        result = default_fit(request, shared, usage, device_order, memory_overcommit)
        if result.fits:
            return result
        reasons.update(result.reasons)
    rank = {d: i for i, d in enumerate(device_order)}
    picks: list[DeviceSlice] = []
    for device in sorted(split, key=lambda d: (rank.get(d.id, len(rank)), d.index)):
        used = usage.get(device.id, UNUSED)
        why = allowed(request, device)
        if why is None and used.exclusive:
            why = FitReason.HELD_EXCLUSIVELY
        geometry = geometry_of(device.partitions)
        if why is None and geometry is None:
            why = FitReason.PARTITION_UNAVAILABLE
        if why is not None or geometry is None:
            reasons[why or FitReason.PARTITION_UNAVAILABLE] += 1
            continue
        need = request.memory_for(device.memory_mib)
        # A named profile is taken as named; else a whole-PPU ask gets the spanning profile.
        spanning = request.partition is None and (request.exclusive or need >= device.memory_mib)
        named = geometry.whole.name if spanning and geometry.whole else request.partition
        before = len(picks)
        picks += place_instances(
            geometry,
            device.id,
            device.index,
            used.partitions_in_use,
            request.count - len(picks),
            0 if spanning else need,
            request.compute_percent,
            named,
        )
        if len(picks) == before:
            reasons[FitReason.PARTITION_UNAVAILABLE] += 1
        if len(picks) == request.count:
            return FitResult(fits=True, devices=tuple(picks), reasons=dict(reasons))
    result = FitResult(fits=False, reasons=dict(reasons))
    asked = f"profile {request.partition}" if request.partition else "the memory and compute asked"
    note = f"; no PPU in MIG mode has a free placement for an instance of {asked}"
    return result.model_copy(update={"message": result.explain() + note})

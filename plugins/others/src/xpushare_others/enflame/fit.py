"""Whether an Enflame DRS request fits a node: which GCU, with which profile.

Why not the core's fit: a DRS partition is one of the GCU's profiles (:mod:`.drs`), chosen
by the request's slices or memory and compute, and it takes that profile's slices, memory
and compute whatever the request said. Whole GCUs (vendor ``enflame``) use the core's fit:
an exclusive request of whole devices is exactly HAMi's rule there (only idle GCUs).

Per GCU, in the placement policy's order, in HAMi's order of checks: health, UUID (and model),
a profile for the ask, a free slice count for it, idle for a ``mutex`` pod, memory, compute
(in slices: see :func:`refusal`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from xpushare.models import DeviceSlice, FitReason, FitResult
from xpushare_others.common.fitting import UNUSED, allowed, idle
from xpushare_others.enflame import drs

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from xpushare.models import ContainerRequest, Device, DeviceUsage, NodeView


def candidates(device: Device) -> list[drs.Profile]:
    ids = device.extra
    named = {p.name: ids.get(f"{drs.PROFILE_ID_PREFIX}{p.name}", "") for p in device.partitions}
    return drs.profiles(named)


def _capacity(device: Device) -> int:
    raw = device.extra.get("drs-capacity", "")
    return int(raw) if raw.isdigit() and len(raw) <= 4 else device.share_slots


def refusal(
    request: ContainerRequest, ask: drs.Ask, device: Device, usage: DeviceUsage
) -> tuple[FitReason, None] | tuple[None, drs.Profile]:
    why = allowed(request, device)
    if why is not None:
        return why, None
    options = candidates(device)
    profile = drs.select(options, ask)
    if profile is None:
        return FitReason.PARTITION_UNAVAILABLE, None
    capacity = _capacity(device)
    by_name = {p.name: p for p in options}
    used = drs.used_slices(
        usage.partitions_in_use,
        usage.used_slots,
        usage.used_memory_mib,
        by_name,
        capacity,
        device.memory_mib,
    )
    if used + profile.slices > capacity:
        return FitReason.SLOTS_EXHAUSTED, None
    if usage.exclusive:
        return FitReason.HELD_EXCLUSIVELY, None
    if request.exclusive and not idle(usage):
        return FitReason.EXCLUSIVE_CONFLICT, None
    if device.memory_mib - usage.used_memory_mib < profile.memory_mib:
        return FitReason.INSUFFICIENT_MEMORY, None
    # HAMi's core check, counted in slices: each profile's share is rounded up (17 % for 1
    # of 6 slices), so comparing percents would lose a GCU's last slice (HAMi's does).
    if usage.used_compute_percent * capacity // 100 + profile.slices > capacity:
        return FitReason.INSUFFICIENT_COMPUTE, None
    return None, profile


def _describe(ask: drs.Ask) -> str:
    if ask.slices is not None:
        return f"a DRS profile of {ask.slices} slices"
    unit = {"gb": "GB", "mib": "MiB"}.get(ask.unit, "GB (MiB above twice the largest)")
    return f"a DRS profile with at least {ask.memory} {unit} and {ask.core} % compute"


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str] = (),
) -> FitResult:
    """One GCU of *node* and its profile for a DRS request."""
    ask = drs.decode_ask(request.partition)
    if ask is None:
        return FitResult(
            fits=False,
            reasons={FitReason.PARTITION_UNAVAILABLE: 1},
            message=f"the request's DRS ask {request.partition!r} was not written by enflame-drs",
        )
    if not node.devices:
        return FitResult(fits=False, reasons={FitReason.NO_DEVICES: 1})
    rank = {d: i for i, d in enumerate(device_order)}
    ordered = sorted(node.devices, key=lambda d: (rank.get(d.id, len(rank)), d.index))
    reasons: Counter[FitReason] = Counter()
    for device in ordered:
        why, profile = refusal(request, ask, device, usage.get(device.id, UNUSED))
        if profile is None:
            assert why is not None
            reasons[why] += 1
            continue
        piece = DeviceSlice(
            device_id=device.id,
            index=device.index,
            memory_mib=profile.memory_mib,
            compute_percent=profile.compute_percent,
            exclusive=request.exclusive or profile.compute_percent >= 100,
            partition=profile.name,
        )
        return FitResult(fits=True, devices=(piece,), reasons=dict(reasons))
    result = FitResult(fits=False, reasons=dict(reasons))
    if reasons.get(FitReason.PARTITION_UNAVAILABLE) == len(node.devices):
        names = ", ".join(p.name for p in candidates(ordered[0]))
        result = result.model_copy(
            update={"message": f"no GCU of this node has {_describe(ask)} (profiles: {names})"}
        )
    return result

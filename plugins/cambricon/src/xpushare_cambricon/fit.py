"""Whether a Cambricon request fits a node: whole MLUs, or one sMLU share of a card.

Why not the core's GPU-like fit: an sMLU instance is a hard quota the driver enforces, so
neither its memory nor its compute may be over-committed (GPUStack lists Cambricon without
compute over-commit, gpustack-devices.md §2.6), a share is made in whole memory units (HAMi's
256 MiB), and only a card whose driver can cut sMLU instances (or a cluster using the env
split) can take a share at all.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from xpushare.models import DeviceSlice, DeviceUsage, FitReason, FitResult
from xpushare.scheduling.numa import BEFORE_NUMA, NumaRun

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from xpushare.models import ContainerRequest, Device, NodeView

_UNUSED = DeviceUsage(device_id="-")


def shareable(device: Device) -> bool:
    return device.share_slots > 1 and (
        device.extra.get("smlu") == "true" or device.mode == "env-split"
    )


def share_memory(request: ContainerRequest, device: Device, unit_mib: int) -> int:
    """MiB a share takes on *device*: what was asked, rounded up to whole memory units."""
    asked = request.memory_for(device.memory_mib)
    rounded = -(-asked // unit_mib) * unit_mib
    # A card whose memory is not a whole number of units still gives all of it.
    return min(device.memory_mib, rounded) if asked <= device.memory_mib else rounded


def refusal(
    request: ContainerRequest, device: Device, usage: DeviceUsage, unit_mib: int
) -> FitReason | None:
    """Why *device* cannot take one share of *request*, or ``None`` when it can."""
    if not device.healthy:
        return FitReason.UNHEALTHY
    model = device.model.upper()
    if request.models_include and not any(m.upper() in model for m in request.models_include):
        return FitReason.MODEL_MISMATCH
    if any(m.upper() in model for m in request.models_exclude):
        return FitReason.MODEL_MISMATCH
    if (request.uuids_include and device.id not in request.uuids_include) or (
        device.id in request.uuids_exclude
    ):
        return FitReason.UUID_MISMATCH
    if usage.exclusive:
        return FitReason.HELD_EXCLUSIVELY
    if request.exclusive:
        idle = not (usage.used_slots or usage.used_memory_mib or usage.used_compute_percent)
        return None if idle else FitReason.EXCLUSIVE_CONFLICT
    if not shareable(device) or usage.used_slots >= device.share_slots:
        return FitReason.SLOTS_EXHAUSTED
    if usage.used_memory_mib + share_memory(request, device, unit_mib) > device.memory_mib:
        return FitReason.INSUFFICIENT_MEMORY
    if usage.used_compute_percent + request.compute_percent > 100:
        return FitReason.INSUFFICIENT_COMPUTE
    if request.compute_percent == 0 and usage.used_compute_percent >= 100:
        # A 0 % share (the env split allows one) on a card whose compute is all booked
        # would get no compute at all: refused as the core's fit refuses it.
        return FitReason.COMPUTE_EXHAUSTED
    return None


def _slice(request: ContainerRequest, device: Device, unit_mib: int) -> DeviceSlice:
    if request.exclusive:
        return DeviceSlice(
            device_id=device.id,
            index=device.index,
            memory_mib=device.memory_mib,
            compute_percent=100,
            exclusive=True,
        )
    return DeviceSlice(
        device_id=device.id,
        index=device.index,
        memory_mib=share_memory(request, device, unit_mib),
        compute_percent=request.compute_percent,
    )


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
    unit_mib: int,
) -> FitResult:
    """Pick ``request.count`` cards of *node* in the policy's *device_order*."""
    if not node.devices:
        return FitResult(fits=False, reasons={FitReason.NO_DEVICES: 1})
    if len(node.devices) < request.count:
        return FitResult(fits=False, reasons={FitReason.TOO_FEW_DEVICES: 1})
    by_id = {d.id: d for d in node.devices}
    listed = set(device_order)
    ordered = [by_id[i] for i in device_order if i in by_id]
    ordered += [d for d in node.devices if d.id not in listed]
    reasons: Counter[FitReason] = Counter()
    # Without a NUMA binding the whole walk is one run.
    run: NumaRun[Device] = NumaRun(request.count)
    chosen: list[Device] | None = None
    for device in ordered:
        why = refusal(request, device, usage.get(device.id, _UNUSED), unit_mib)
        if request.numa_bind and chosen is None and why not in BEFORE_NUMA:
            run.meet(device.numa_node)
        if why is not None:
            reasons[why] += 1
            continue
        if chosen is None and run.add(device):
            chosen = list(run.picks)
    if chosen is None:
        if request.numa_bind and run.split():
            reasons[FitReason.NUMA_MISMATCH] += run.discarded
        else:
            reasons[FitReason.NOT_ENOUGH_FIT] += 1
        return FitResult(fits=False, reasons=dict(reasons))
    return FitResult(
        fits=True,
        devices=tuple(_slice(request, d, unit_mib) for d in chosen),
        reasons=dict(reasons),
    )

"""Whether a Neuron request fits a node: a block of whole devices, or cores of one device.

Why not the core's fit: several devices must be a contiguous block of idle devices whose
shape depends on the instance type, and cores are bits of a device's mask, not a percent
(:mod:`~xpushare_others.neuron.cores`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Final

from xpushare.models import DeviceSlice, FitReason, FitResult
from xpushare_others.common.fitting import UNUSED, allowed, idle
from xpushare_others.neuron import cores
from xpushare_others.neuron.request import wanted_cores

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from xpushare.models import ContainerRequest, Device, DeviceUsage, NodeView

#: The node label Kubernetes sets from the cloud provider (what HAMi reads).
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"


def instance_type(node: NodeView) -> str:
    label = node.labels.get(INSTANCE_TYPE_LABEL, "")[:64]
    if label:
        return label
    return next(
        (d.extra["instance_type"] for d in node.devices if d.extra.get("instance_type")), ""
    )


def _cores_of(device: Device) -> int:
    return device.compute_units or device.share_slots


def _whole(device: Device) -> DeviceSlice:
    return DeviceSlice(
        device_id=device.id,
        index=device.index,
        memory_mib=device.memory_mib,
        compute_percent=100,
        exclusive=True,
    )


def _block(
    request: ContainerRequest, node: NodeView, usage: Mapping[str, DeviceUsage]
) -> FitResult:
    ordered = sorted(node.devices, key=lambda d: d.index)
    reasons: Counter[FitReason] = Counter()
    free = []
    for d in ordered:
        why = allowed(request, d)
        if why is None and not idle(usage.get(d.id, UNUSED)):
            why = FitReason.EXCLUSIVE_CONFLICT
        if why is not None:
            reasons[why] += 1
        free.append(why is None)
    kind = instance_type(node)
    ring = cores.is_ring(kind)
    picked = cores.block(free, request.count, ring)
    if picked is None:
        reasons[FitReason.NUMA_MISMATCH] += 1
        shape = (
            "any run of consecutive devices"
            if ring
            else "an aligned block of 1, 4, 8 or 16 consecutive devices"
        )
        return FitResult(
            fits=False,
            reasons=dict(reasons),
            message=(
                f"{sum(free)} Neuron devices are idle, but {request.count} must be {shape} on "
                f"instance type {kind or 'unknown'} (HAMi's rule)"
            ),
        )
    return FitResult(
        fits=True, devices=tuple(_whole(ordered[i]) for i in picked), reasons=dict(reasons)
    )


def _single(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
) -> FitResult:
    want = wanted_cores(request)
    rank = {d: i for i, d in enumerate(device_order)}
    reasons: Counter[FitReason] = Counter()
    for device in sorted(node.devices, key=lambda d: (rank.get(d.id, len(rank)), d.index)):
        used = usage.get(device.id, UNUSED)
        why = allowed(request, device)
        n = _cores_of(device)
        if why is None and used.used_slots >= device.share_slots:
            why = FitReason.SLOTS_EXHAUSTED
        if why is None and request.exclusive and not idle(used):
            why = FitReason.EXCLUSIVE_CONFLICT
        mask = None
        if why is None:
            mask = cores.lowest_free(cores.used_mask(device, used), n, n if want is None else want)
            if mask is None:
                why = FitReason.INSUFFICIENT_COMPUTE
        if why is not None or mask is None:
            reasons[why or FitReason.INSUFFICIENT_COMPUTE] += 1
            continue
        if want is None:
            return FitResult(fits=True, devices=(_whole(device),), reasons=dict(reasons))
        share = cores.share(mask, n)
        piece = DeviceSlice(
            device_id=device.id,
            index=device.index,
            memory_mib=device.memory_mib * share // 100,
            compute_percent=share,
            exclusive=request.exclusive or mask == cores.full(n),
            partition=cores.mask_name(mask),
        )
        return FitResult(fits=True, devices=(piece,), reasons=dict(reasons))
    return FitResult(fits=False, reasons=dict(reasons))


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str] = (),
) -> FitResult:
    if not node.devices:
        return FitResult(fits=False, reasons={FitReason.NO_DEVICES: 1})
    if request.count > len(node.devices):
        return FitResult(fits=False, reasons={FitReason.TOO_FEW_DEVICES: 1})
    if request.count > 1:
        return _block(request, node, usage)
    return _single(request, node, usage, device_order)

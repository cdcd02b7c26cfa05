"""Whether a Kunlun request fits a node: whole XPUs or same-size vXPUs, in topology groups.

Why not the core's fit: Kunlun places a container's XPUs by the board's links
(:mod:`~xpushare_others.kunlun.topology`), never anywhere that has room, and a vXPU is a
fixed-size slice (24, 48 or 96 GiB) that shares an XPU only with slices of its own size
(HAMi's FitVXPU: the average memory of the slices already there equals the request). Memory
is not over-committed: a vXPU slice is cut by the vXPU runtime, not counted by a shim.

The driver's handles bound the cuts (:data:`~xpushare_others.kunlun.config.DRIVER_HANDLES`):
an XPU cut into slices of 1/n of it takes n handles besides its own, so a vXPU that would cut
one more XPU past the node's budget goes to XPUs already cut to its size, or does not fit.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from xpushare.models import DeviceSlice, DeviceUsage, FitReason, FitResult
from xpushare_others.common.fitting import UNUSED, allowed, idle
from xpushare_others.kunlun import topology
from xpushare_others.kunlun.config import DRIVER_HANDLES, VXPU_VENDOR

if TYPE_CHECKING:
    from collections.abc import Mapping

    from xpushare.models import ContainerRequest, Device, NodeView


def refusal(request: ContainerRequest, device: Device, usage: DeviceUsage) -> FitReason | None:
    """Why *device* cannot take one XPU (or vXPU) of *request*; None when it can."""
    why = allowed(request, device)
    if why is not None:
        return why
    if request.vendor != VXPU_VENDOR:
        # A whole XPU goes only to a container alone on it (HAMi's FitXPU: Used == 0).
        return None if idle(usage) else FitReason.EXCLUSIVE_CONFLICT
    if usage.exclusive:
        return FitReason.HELD_EXCLUSIVELY
    if request.exclusive and not idle(usage):
        return FitReason.EXCLUSIVE_CONFLICT
    if usage.used_slots >= device.share_slots:
        return FitReason.SLOTS_EXHAUSTED
    size = request.memory_for(device.memory_mib)
    if usage.used_memory_mib + size > device.memory_mib:
        return FitReason.INSUFFICIENT_MEMORY
    if usage.used_slots and usage.used_memory_mib // usage.used_slots != size:
        return FitReason.PARTITION_UNAVAILABLE
    return None


def _slice(request: ContainerRequest, device: Device) -> DeviceSlice:
    if request.vendor != VXPU_VENDOR:
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
        memory_mib=request.memory_for(device.memory_mib),
        compute_percent=request.compute_percent,
        exclusive=request.exclusive,
    )


def _cut_handles(device: Device, slice_mib: int) -> int:
    """Handles an XPU cut into slices of *slice_mib* takes besides its own (0: not cut)."""
    return device.memory_mib // slice_mib if 0 < slice_mib < device.memory_mib else 0


def handles(node: NodeView, usage: Mapping[str, DeviceUsage]) -> int:
    """The driver handles *node*'s XPUs hold: one each, plus those of each cut XPU."""
    total = len(node.devices)
    for d in node.devices:
        u = usage.get(d.id, UNUSED)
        if u.used_slots:
            total += _cut_handles(d, u.used_memory_mib // u.used_slots)
    return total


def _new_handles(
    request: ContainerRequest, picked: list[Device], usage: Mapping[str, DeviceUsage]
) -> int:
    if request.vendor != VXPU_VENDOR:
        return 0
    return sum(
        _cut_handles(d, request.memory_for(d.memory_mib))
        for d in picked
        if idle(usage.get(d.id, UNUSED))
    )


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    max_handles: int = DRIVER_HANDLES,
) -> FitResult:
    """Pick ``request.count`` XPUs of one board of *node* by Kunlun's topology groups."""
    if not node.devices:
        return FitResult(fits=False, reasons={FitReason.NO_DEVICES: 1})
    if request.count not in topology.COUNTS:
        return FitResult(
            fits=False,
            reasons={FitReason.NOT_ENOUGH_FIT: 1},
            message=(
                f"a Kunlun container gets 1, 2, 4 or 8 XPUs (the board's topology groups); "
                f"it asks for {request.count}"
            ),
        )
    if len(node.devices) < request.count:
        return FitResult(fits=False, reasons={FitReason.TOO_FEW_DEVICES: 1})
    reasons: Counter[FitReason] = Counter()
    boards: dict[int, dict[int, Device]] = {}
    for device in sorted(node.devices, key=lambda d: d.index):
        why = refusal(request, device, usage.get(device.id, UNUSED))
        if why is not None:
            reasons[why] += 1
            continue
        board = boards.setdefault(device.index // topology.BOARD, {})
        board.setdefault(device.index % topology.BOARD, device)
    fitting = sum(len(b) for b in boards.values())
    budget = max_handles - handles(node, usage)
    over_budget = False
    for _, free in sorted(boards.items()):
        picked = topology.select(free, request.count)
        if picked and _new_handles(request, [free[p] for p in picked], usage) > budget:
            # Cutting more XPUs would pass the driver's handles: XPUs already cut only.
            over_budget = True
            cut = {p: d for p, d in free.items() if not idle(usage.get(d.id, UNUSED))}
            picked = topology.select(cut, request.count)
        if picked:
            return FitResult(
                fits=True,
                devices=tuple(_slice(request, free[p]) for p in picked),
                reasons=dict(reasons),
            )
    if over_budget:
        reasons[FitReason.PARTITION_UNAVAILABLE] += 1
        return FitResult(
            fits=False,
            reasons=dict(reasons),
            message=(
                f"cutting {request.count} more XPU(s) into vXPUs of "
                f"{request.memory_for(node.devices[0].memory_mib)} MiB would pass the "
                f"{max_handles} device handles of the node's Kunlun driver "
                f"({handles(node, usage)} in use: one per XPU and one per vXPU of each cut "
                "XPU); ask for larger vXPUs or fewer of them"
            ),
        )
    reasons[FitReason.NOT_ENOUGH_FIT] += 1
    result = FitResult(fits=False, reasons=dict(reasons))
    if fitting >= request.count:
        result = result.model_copy(
            update={
                "message": (
                    f"{result.explain()}: {fitting} XPUs fit, but no Kunlun topology group of "
                    f"{request.count} is among them (one half 0-3 or 4-7 of a board, a cross "
                    "pair i and i+4, or a linked quad)"
                )
            }
        )
    return result


def score(
    request: ContainerRequest, fit: FitResult, usage: Mapping[str, DeviceUsage], node: NodeView
) -> float:
    """HAMi's bubble score of the placement, in [0, 1] (whole XPUs only; vXPUs score 0)."""
    if request.vendor == VXPU_VENDOR or not fit.fits:
        return 0.0
    busy = [d.index for d in node.devices if usage.get(d.id, UNUSED).used_slots > 0]
    return topology.score(busy, [s.index for s in fit.devices])

"""The AMD fit: compute shares are whole compute units, and partitions are never double-booked.

Why not the core's default fit:

* **Compute units.** HAMi's AMD backend books compute as compute units (CUs), not percents:
  a request for *p* % of a GPU with *T* CUs takes ``max(1, T * p // 100)`` CUs, at most *T*,
  and a request for the whole memory takes every CU (research/hami-protocol.md §8.2). The
  scheduler's usage ledger counts compute in percents, so each booking is recorded as the
  percent its CUs occupy, **rounded up**: ``ceil(100 * cus / T)``. Since every booking's
  percent is at least its CUs' true share, a sum of bookings within 100 % never holds more
  than *T* CUs, and Allocate can give each container ``floor(T * percent / 100)`` CUs, which
  is at least what it asked for and, summed, still at most *T* (see :func:`granted_units`).
* **Partitions.** A partitioned GPU (CPX, DPX, ...) is one device per partition, each with its
  own id, so two containers can never get the same partition unless it is shared like any
  GPU. What the default cannot see is a *layout change*: if a pod still holds a GPU (or one
  of its partitions) under ids of another layout than today's inventory, every device of
  that physical GPU is refused (:mod:`xpushare_amd.ids` reads the GPU and layout from any id).
  A request may name a layout (``partition: "cpx"``) to get only such partitions.

Checks run per device in HAMi's order, and each refused device is counted under the first
check it failed, so ``xpushare fit`` explains the whole node.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from xpushare.models import DeviceSlice, FitReason, FitResult
from xpushare.scheduling.numa import BEFORE_NUMA, NumaRun
from xpushare_amd import ids
from xpushare_amd.config import VENDOR

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from xpushare.models import ContainerRequest, Device, DeviceUsage, NodeView


#: A model entry that names no model: what ``amd.com/use-gputype`` gives when it holds only
#: separators (``", "``). HAMi's AMD match (pkg/device/amd/device.go, checkAMDType) then
#: accepts no card, where its other vendors accept every card; an empty entry never matches.
NO_MODEL = ""


def model_wanted(request: ContainerRequest, model: str) -> bool:
    """Whether *model* (upper case) passes the request's model lists, HAMi's AMD way."""
    include = request.models_include
    if include and not any(m.strip() and m.strip().upper() in model for m in include):
        return False
    return not any(m.strip() and m.strip().upper() in model for m in request.models_exclude)


def wants_whole_memory(request: ContainerRequest) -> bool:
    return request.memory_mib is None and request.memory_percent is None


def compute_units(request: ContainerRequest, total: int) -> int:
    """CUs a request takes on a GPU with *total* CUs (HAMi's rule, hami-protocol.md §8.2)."""
    if request.exclusive or wants_whole_memory(request):
        return total
    return min(total, max(1, total * request.compute_percent // 100))


def booked_percent(request: ContainerRequest, device: Device) -> int:
    """The compute percent a request is booked at on *device*: its CUs' share, rounded up.

    A GPU that does not report its CUs is booked in plain percents.
    """
    total = device.compute_units
    if total <= 0:
        return 100 if request.exclusive or wants_whole_memory(request) else request.compute_percent
    return math.ceil(100 * compute_units(request, total) / total)


def granted_units(percent: int, total: int) -> int:
    """CUs Allocate gives a container booked at *percent* of a GPU with *total* CUs.

    ``floor(total * percent / 100)`` is never less than the CUs the request was booked for
    (the percent was rounded up from them) and, over all bookings of a GPU (at most 100 %),
    never sums to more than *total*.
    """
    return max(1, total * percent // 100) if total > 0 else 0


def _layout_conflicts(
    devices: Sequence[Device], usage: Mapping[str, DeviceUsage]
) -> dict[str, list[str]]:
    """Physical GPUs held under another layout than today's: physical id -> held ids."""
    current: dict[str, str] = {}
    for d in devices:
        key = ids.parse(d.id)
        current[key.physical] = key.layout
    known = {d.id for d in devices}
    held: dict[str, list[str]] = defaultdict(list)
    for device_id, u in usage.items():
        if device_id in known or not (u.used_slots or u.used_memory_mib or u.exclusive):
            continue
        key = ids.parse(device_id)
        layout = current.get(key.physical)
        if layout is not None and layout != key.layout:
            held[key.physical].append(device_id)
    return held


def _partition_matches(wanted: str, device: Device) -> bool:
    wanted = wanted.strip().lower()
    layout = ids.parse(device.id).layout
    memory = device.extra.get("memory_partition", "").lower()
    return wanted in (layout, f"{layout}-{memory}", f"{layout}/{memory}")


def check(
    request: ContainerRequest,
    device: Device,
    usage: DeviceUsage | None,
    memory_overcommit: float,
    held_elsewhere: bool,
) -> FitReason | DeviceSlice:
    """The first check *device* fails for *request*, or the slice it would give."""
    used_slots = usage.used_slots if usage else 0
    used_memory = usage.used_memory_mib if usage else 0
    used_compute = usage.used_compute_percent if usage else 0
    if not device.healthy:
        return FitReason.UNHEALTHY
    if not model_wanted(request, device.model.upper()):
        return FitReason.MODEL_MISMATCH
    names = {device.id, ids.parse(device.id).physical, device.extra.get("uuid", "")}
    if request.uuids_include and not names & set(request.uuids_include):
        return FitReason.UUID_MISMATCH
    if names & set(request.uuids_exclude):
        return FitReason.UUID_MISMATCH
    if held_elsewhere:
        return FitReason.PARTITION_UNAVAILABLE
    if request.partition is not None and not _partition_matches(request.partition, device):
        return FitReason.PARTITION_UNAVAILABLE
    if used_slots >= device.share_slots:
        return FitReason.SLOTS_EXHAUSTED
    if usage is not None and usage.exclusive:
        return FitReason.HELD_EXCLUSIVELY
    if request.exclusive and used_slots > 0:
        return FitReason.EXCLUSIVE_CONFLICT
    need = request.memory_for(device.memory_mib)
    if used_memory + need > int(device.memory_mib * memory_overcommit):
        return FitReason.INSUFFICIENT_MEMORY
    percent = booked_percent(request, device)
    if used_compute + percent > 100:
        return FitReason.INSUFFICIENT_COMPUTE
    return DeviceSlice(
        device_id=device.id,
        index=device.index,
        memory_mib=need,
        compute_percent=percent,
        exclusive=request.exclusive,
    )


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
    memory_overcommit: float,
) -> FitResult:
    """Whether *request* fits *node* given *usage*, and which GPUs it gets.

    Every device is examined, so ``reasons`` explains the whole node even when it fits.
    """
    devices = [d for d in node.devices if d.vendor == VENDOR]
    if not devices:
        return FitResult(
            fits=False,
            reasons={FitReason.NO_DEVICES: 1},
            message=f"node {node.name} has no AMD GPUs",
        )
    rank = {device_id: i for i, device_id in enumerate(device_order)}
    ordered = sorted(devices, key=lambda d: rank.get(d.id, len(rank) + d.index))
    held = _layout_conflicts(devices, usage)
    reasons: Counter[FitReason] = Counter()
    # Without a NUMA binding the whole walk is one run.
    run: NumaRun[DeviceSlice] = NumaRun(request.count)
    picks: list[DeviceSlice] | None = None
    for device in ordered:
        result = check(
            request,
            device,
            usage.get(device.id),
            memory_overcommit,
            ids.parse(device.id).physical in held,
        )
        refused = isinstance(result, FitReason)
        if request.numa_bind and picks is None and not (refused and result in BEFORE_NUMA):
            run.meet(device.numa_node)
        if isinstance(result, FitReason):
            reasons[result] += 1
            continue
        if picks is None and run.add(result):
            picks = list(run.picks)
    if picks is not None:
        return FitResult(fits=True, devices=tuple(picks), reasons=dict(reasons))
    if len(devices) < request.count:
        reasons[FitReason.TOO_FEW_DEVICES] = 1
    elif request.numa_bind and run.split():
        reasons[FitReason.NUMA_MISMATCH] = run.discarded
    else:
        reasons[FitReason.NOT_ENOUGH_FIT] = 1
    return FitResult(fits=False, reasons=dict(reasons), message=_message(request, reasons, held))


def _message(
    request: ContainerRequest, reasons: Mapping[FitReason, int], held: Mapping[str, list[str]]
) -> str:
    who = f"container {request.container!r} " if request.container else ""
    parts = [f"{n} {r.value}" for r, n in sorted(reasons.items(), key=lambda x: (-x[1], x[0]))]
    text = f"{who}{VENDOR} x{request.count}: " + ", ".join(parts)
    for physical, device_ids in sorted(held.items()):
        text += (
            f"; GPU {physical} is still held as {', '.join(sorted(device_ids))} from before "
            "its partition mode changed: it is refused until those pods end"
        )
    return text

"""Whether an Ascend request fits a node: whole NPUs, or a vNPU template on one chip.

Why not the core's GPU-like fit: a vNPU is a hard slice of a chip's AI cores and memory, and
only the templates of the chip's family exist. A chip holds a mix of templates while their
AI cores and memory add up to no more than it has, so the fit books AI cores exactly (from
the template table detect published in ``Device.extra``) rather than by rounded percents.
On 910C super-pod chips whole NPUs are taken a module (card) at a time.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from xpushare.models import DeviceSlice, DeviceUsage, FitReason, FitResult
from xpushare_ascend.detect import TEMPLATE_CORES_KEY

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from xpushare.models import ContainerRequest, Device, NodeView

_UNUSED = DeviceUsage(device_id="-")


def template_cores(device: Device) -> dict[str, int]:
    cores: dict[str, int] = {}
    for item in device.extra.get(TEMPLATE_CORES_KEY, "").split(","):
        name, _, value = item.partition("=")
        if name and value.isdigit():
            cores[name] = int(value)
    return cores


def _idle(usage: DeviceUsage) -> bool:
    return not (
        usage.exclusive
        or usage.used_slots
        or usage.used_memory_mib
        or usage.used_compute_percent
        or usage.partitions_in_use
    )


def refusal(request: ContainerRequest, device: Device, usage: DeviceUsage) -> FitReason | None:
    """Why *device* cannot take one share of *request*, or ``None`` when it can."""
    if not device.healthy:
        return FitReason.UNHEALTHY
    model = device.model.upper()
    if request.models_include and model not in {m.upper() for m in request.models_include}:
        return FitReason.MODEL_MISMATCH
    if model in {m.upper() for m in request.models_exclude}:
        return FitReason.MODEL_MISMATCH
    if request.uuids_include and device.id not in request.uuids_include:
        return FitReason.UUID_MISMATCH
    if device.id in request.uuids_exclude:
        return FitReason.UUID_MISMATCH
    if usage.exclusive:
        return FitReason.HELD_EXCLUSIVELY
    if request.exclusive or request.partition is None:
        return None if _idle(usage) else FitReason.EXCLUSIVE_CONFLICT
    return _template_refusal(request.partition, device, usage)


def _template_refusal(name: str, device: Device, usage: DeviceUsage) -> FitReason | None:
    profile = next((p for p in device.partitions if p.name == name), None)
    cores = template_cores(device)
    if profile is None or name not in cores:
        return FitReason.PARTITION_UNAVAILABLE
    if usage.used_slots >= device.share_slots:
        return FitReason.SLOTS_EXHAUSTED
    in_use = Counter(usage.partitions_in_use)
    if in_use[name] >= profile.max_count:
        return FitReason.PARTITION_UNAVAILABLE
    if used_cores(device, usage, cores) + cores[name] > device.compute_units:
        return FitReason.INSUFFICIENT_COMPUTE
    if usage.used_memory_mib + profile.memory_mib > device.memory_mib:
        return FitReason.INSUFFICIENT_MEMORY
    return None


def used_cores(device: Device, usage: DeviceUsage, cores: Mapping[str, int]) -> int:
    """AI cores taken on *device*: exact for the templates listed in use, and, for compute
    booked without a template name (earlier containers of the same pod, which the core
    books by percent), the percent turned back into cores, rounded down: a template's
    percent is rounded up from its cores by less than one core, so this gives the cores
    back exactly for one such template and errs towards "full" for several."""
    percents = {p.name: p.compute_percent for p in device.partitions}
    in_use = Counter(usage.partitions_in_use)
    exact = sum(cores.get(p, device.compute_units) * n for p, n in in_use.items())
    listed = sum(percents.get(p, 100) * n for p, n in in_use.items())
    unexplained = max(0, usage.used_compute_percent - listed)
    return exact + unexplained * device.compute_units // 100


def _slice(request: ContainerRequest, device: Device) -> DeviceSlice:
    if request.partition is not None and not request.exclusive:
        profile = next(p for p in device.partitions if p.name == request.partition)
        return DeviceSlice(
            device_id=device.id,
            index=device.index,
            memory_mib=profile.memory_mib,
            compute_percent=profile.compute_percent,
            partition=profile.name,
        )
    return DeviceSlice(
        device_id=device.id,
        index=device.index,
        memory_mib=device.memory_mib,
        compute_percent=100,
        exclusive=True,
    )


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
) -> FitResult:
    """Pick ``request.count`` devices of *node* in the policy's *device_order*."""
    if not node.devices:
        return FitResult(fits=False, reasons={FitReason.NO_DEVICES: 1})
    if len(node.devices) < request.count:
        return FitResult(fits=False, reasons={FitReason.TOO_FEW_DEVICES: 1})
    by_id = {d.id: d for d in node.devices}
    ordered = [by_id[i] for i in device_order if i in by_id]
    ordered += [d for d in node.devices if d.id not in set(device_order)]
    reasons: Counter[FitReason] = Counter()
    takers: list[Device] = []
    for device in ordered:
        why = refusal(request, device, usage.get(device.id, _UNUSED))
        if why is None:
            takers.append(device)
        else:
            reasons[why] += 1
    if request.exclusive and any(d.extra.get("super_pod") == "true" for d in takers):
        takers = _whole_modules(takers, node.devices)
    if len(takers) < request.count:
        reasons[FitReason.NOT_ENOUGH_FIT] += 1
        return FitResult(fits=False, reasons=dict(reasons))
    chosen = takers[: request.count]
    return FitResult(
        fits=True, devices=tuple(_slice(request, d) for d in chosen), reasons=dict(reasons)
    )


def _whole_modules(takers: list[Device], all_devices: Sequence[Device]) -> list[Device]:
    """Keep only devices whose whole module (card) is free, module by module, in order."""
    per_card: dict[str, int] = Counter(d.extra.get("card", d.id) for d in all_devices)
    free: dict[str, list[Device]] = defaultdict(list)
    for d in takers:
        free[d.extra.get("card", d.id)].append(d)
    kept: list[Device] = []
    for d in takers:
        card = d.extra.get("card", d.id)
        if len(free[card]) == per_card[card] and d not in kept:
            kept.extend(free[card])
    return kept

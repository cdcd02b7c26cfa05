"""Scheduler-side placement rules the core's default fit does not know: topology and MIG.

Why a fit of its own, and when: the core's default implements the GPU sharing model
(health, model and UUID constraints, share slots, exclusivity, memory, compute, NUMA) and
picks devices in the placement policy's order. That is right for most requests, so this
module answers ``None`` for them and the default decides. It answers itself only where the
default would be wrong or blind:

* **A node with GPUs in MIG mode.** Such a GPU is split by the hardware; booking it whole,
  or as a share of a whole, would give its silicon to two pods at once. Requests that name a
  MIG profile (``request.partition``) get free instances of that profile. Other requests go
  to the node's whole GPUs; when those do not suffice, each slice gets the smallest free
  instance that holds the memory asked for, as HAMi's MIG mode does (research/
  hami-protocol.md §5.2), so a HAMi user's ``nvidia.com/gpumem`` request runs on MIG too.
  Exclusive requests never get an instance. None of this depends on what the default knows
  about partitions.
* **Dynamic MIG.** A GPU whose profiles carry placements has its instances created per
  container: each slice gets the smallest profile that holds the request (or the one it
  names) at the start that overlaps no booked instance and blocks the fewest others
  (:mod:`xpushare.scheduling.partitions`), booked as ``"<profile>@<start>"``.
* **Modes.** A request with HAMi's ``nvidia.com/vgpu-mode`` is given only GPUs whose mode
  it names; a GPU in ``exclusive`` mode is given whole to one container.
* **Several GPUs for one container on a node with NVLinks.** Among the GPUs that fit, the
  set with the best links between its members wins (HAMi's topology-aware choice, research/
  hami-protocol.md §5.3), ties going to the policy's order. A score alone could not do this:
  it ranks nodes, while the choice of GPUs happens inside one node.
* **HAMi's topology-aware GPU policy** (``ContainerRequest.topology_aware``). One GPU goes
  to the candidate least connected to the other candidates (the lowest sum of pair scores;
  ties: the first in the policy's order), which keeps well-linked GPUs free for the pods that
  need several (HAMi's computeWorstSingleCard, research/hami-protocol.md §5.3). Several GPUs
  get the best-linked set by every link kind, PCIe levels too, not only where there are
  NVLinks.

The per-GPU checks mirror the sharing model in HAMi's order (§5.1). Everything here is pure
and allocation-light: ``/filter`` calls it for every candidate node.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Final

from xpushare.models import (
    ContainerRequest,
    Device,
    DeviceSlice,
    DeviceUsage,
    FitReason,
    FitResult,
    NodeView,
)
from xpushare.scheduling.partitions import Geometry, geometry_of, place_instances
from xpushare_nvidia import modes, topology
from xpushare_nvidia.mig import MIG_MODE

#: Above this many candidate sets, the best-connected set is searched greedily instead of
#: exhaustively. C(16, 8) = 12,870 sets would take tens of milliseconds in Python per node;
#: C(14, 7) = 3,432 (the largest below) stays near a millisecond.
EXHAUSTIVE_LIMIT: Final = 3432

_EMPTY = DeviceUsage(device_id="-")


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
    memory_overcommit: float,
) -> FitResult | None:
    """This vendor's answer, or ``None`` to let the core's default decide."""
    devices = node.devices
    special = any(d.mode != modes.SHARED for d in devices)
    if (
        request.partition is None
        and request.mode is None
        and not special
        and (request.count < 2 or not topology.has_nvlink(devices))
        and not (request.topology_aware and any(d.links for d in devices))
    ):
        return None
    if not devices:
        return FitResult(fits=False, reasons={FitReason.NO_DEVICES: 1})
    ordered = _ordered(devices, device_order)
    refused = 0
    if request.mode is not None:
        kept = [d for d in ordered if modes.allows(request.mode, d.mode)]
        refused, ordered = len(ordered) - len(kept), kept
    result = (
        _fit_partition(request, ordered, usage)
        if request.partition is not None
        else _fit_shared(request, ordered, usage, memory_overcommit)
    )
    if not refused:
        return result
    reasons = {**result.reasons, FitReason.MODE_MISMATCH: refused}
    update: dict[str, object] = {"reasons": reasons}
    if result.message:
        update["message"] = f"{result.message}; {refused} GPU(s) not in mode {request.mode}"
    return result.model_copy(update=update)


def applies(devices: Sequence[Device]) -> bool:
    """Whether :func:`fit` may answer anything but ``None`` for a request without a partition
    or a mode on a node with *devices*: only where a GPU is not in the plain shared mode
    (MIG, exclusive) or GPUs are linked by NVLink (the conditions of :func:`fit` that do
    not depend on the request)."""
    return any(d.mode != modes.SHARED for d in devices) or topology.has_nvlink(devices)


def _ordered(devices: Sequence[Device], order: Sequence[str]) -> list[Device]:
    rank = {device_id: i for i, device_id in enumerate(order)}
    return sorted(devices, key=lambda d: (rank.get(d.id, len(rank)), d.index))


def _constraints(request: ContainerRequest, device: Device) -> FitReason | None:
    if not device.healthy:
        return FitReason.UNHEALTHY
    model = device.model.upper()
    if request.models_include and not any(m.upper() in model for m in request.models_include):
        return FitReason.MODEL_MISMATCH
    if any(m.upper() in model for m in request.models_exclude):
        return FitReason.MODEL_MISMATCH
    if request.uuids_include and device.id not in request.uuids_include:
        return FitReason.UUID_MISMATCH
    if device.id in request.uuids_exclude:
        return FitReason.UUID_MISMATCH
    return None


def check_shared(
    request: ContainerRequest, device: Device, used: DeviceUsage, memory_overcommit: float
) -> FitReason | tuple[int, int]:
    """Why *device* cannot take a share of *request*, or the (MiB, compute %) it would take.

    A tuple rather than a slice: most devices checked are not picked, and a validated model
    per device would cost more than the check.
    """
    why = _constraints(request, device)
    if why is not None:
        return why
    if used.exclusive:
        return FitReason.HELD_EXCLUSIVELY
    if used.used_slots >= device.share_slots:
        return FitReason.SLOTS_EXHAUSTED
    if request.exclusive and used.used_slots > 0:
        return FitReason.EXCLUSIVE_CONFLICT
    memory = device.memory_mib if request.exclusive else request.memory_for(device.memory_mib)
    compute = request.effective_compute
    if int(device.memory_mib * memory_overcommit) - used.used_memory_mib < memory:
        return FitReason.INSUFFICIENT_MEMORY
    if 100 - used.used_compute_percent < compute:
        return FitReason.INSUFFICIENT_COMPUTE
    if compute == 100 and used.used_slots > 0:
        return FitReason.EXCLUSIVE_CONFLICT
    if compute == 0 and used.used_compute_percent >= 100:
        return FitReason.COMPUTE_EXHAUSTED
    return memory, compute


def _fit_shared(
    request: ContainerRequest,
    ordered: list[Device],
    usage: Mapping[str, DeviceUsage],
    memory_overcommit: float,
) -> FitResult:
    """Whole or shared GPUs first; MIG instances, HAMi's way, when those do not suffice."""
    reasons: Counter[FitReason] = Counter()
    candidates: list[Device] = []
    pieces: dict[str, tuple[int, int]] = {}
    split: list[Device] = []
    for device in ordered:
        if device.mode == MIG_MODE:
            split.append(device)
            continue
        checked = check_shared(request, device, usage.get(device.id, _EMPTY), memory_overcommit)
        if device.mode == modes.EXCLUSIVE and not isinstance(checked, FitReason):
            checked = (device.memory_mib, 100)  # the whole GPU, whatever was asked
        if isinstance(checked, FitReason):
            reasons[checked] += 1
            continue
        candidates.append(device)
        pieces[device.id] = checked
    if not split and len(ordered) < request.count:
        reasons[FitReason.TOO_FEW_DEVICES] += 1
    if len(candidates) >= request.count or not split:
        chosen = _choose(request, candidates, reasons)
        if chosen is not None:
            if split:  # left for requests that a MIG instance serves better
                reasons[FitReason.PARTITION_UNAVAILABLE] += len(split)
            slices = tuple(
                DeviceSlice(
                    device_id=d.id,
                    index=d.index,
                    memory_mib=pieces[d.id][0],
                    compute_percent=pieces[d.id][1],
                    exclusive=request.exclusive or d.mode == modes.EXCLUSIVE,
                )
                for d in chosen
            )
            return FitResult(fits=True, devices=slices, reasons=dict(reasons))
        return FitResult(fits=False, reasons=dict(reasons))
    # Not enough whole GPUs: MIG instances that hold the request (never mixed with whole
    # GPUs in one container: HAMi-core cannot limit a MIG device).
    mig_reasons: Counter[FitReason] = Counter()
    picks = _mig_instances_for(request, split, usage, mig_reasons)
    if picks is not None:
        return FitResult(fits=True, devices=tuple(picks), reasons=dict(reasons + mig_reasons))
    reasons.update(mig_reasons)
    if candidates:
        reasons[FitReason.NOT_ENOUGH_FIT] += len(candidates)
    result = FitResult(fits=False, reasons=dict(reasons))
    note = (
        f"; {len(split)} GPU(s) in MIG mode have no free MIG instance that holds the request"
        " (exclusive requests never get one)"
    )
    return result.model_copy(update={"message": result.explain() + note})


def _mig_instances_for(
    request: ContainerRequest,
    split: list[Device],
    usage: Mapping[str, DeviceUsage],
    reasons: Counter[FitReason],
) -> list[DeviceSlice] | None:
    """``request.count`` MIG slices, each the smallest free profile that holds the request.

    HAMi's MIG mode (research/hami-protocol.md §5.2): the memory asked for (a percent is of
    the whole GPU) picks the smallest profile with at least that much memory, and at least
    the compute asked for; an exclusive request is never served by an instance. On a GPU
    in dynamic MIG mode, a request for the whole GPU (exclusive, or all its memory) gets the
    instance that spans it (7g on an A100) when the GPU holds nothing else: the only whole
    GPU a MIG-mode GPU has, created for it like any other instance.
    """
    picks: list[DeviceSlice] = []
    for device in split:
        why = _constraints(request, device)
        used = usage.get(device.id, _EMPTY)
        geometry = geometry_of(device.partitions)
        if why is None and (used.exclusive or (request.exclusive and geometry is None)):
            why = FitReason.EXCLUSIVE_CONFLICT
        if why is not None:
            reasons[why] += 1
            continue
        need = request.memory_for(device.memory_mib)
        if geometry is not None:
            before = len(picks)
            whole = request.exclusive or need >= device.memory_mib
            named = geometry.whole.name if whole and geometry.whole else request.partition
            picks += _place(
                geometry,
                device,
                used,
                request.count - len(picks),
                0 if whole else need,
                request,
                named,
            )
            if len(picks) == before:
                reasons[FitReason.PARTITION_UNAVAILABLE] += 1
            if len(picks) == request.count:
                return picks
            continue
        taken = Counter(used.partitions_in_use)
        fitting = sorted(
            (
                p
                for p in device.partitions
                if p.memory_mib >= need and p.compute_percent >= request.compute_percent
            ),
            key=lambda p: (p.memory_mib, p.compute_percent, p.name),
        )
        before = len(picks)
        while len(picks) < request.count:
            # Each slice takes the smallest fitting profile that still has a free instance.
            profile = next((p for p in fitting if taken[p.name] < p.max_count), None)
            if profile is None:
                break
            taken[profile.name] += 1
            picks.append(
                DeviceSlice(
                    device_id=device.id,
                    index=device.index,
                    memory_mib=profile.memory_mib,
                    compute_percent=profile.compute_percent,
                    partition=profile.name,
                )
            )
        if len(picks) == before:
            reasons[FitReason.PARTITION_UNAVAILABLE] += 1
        if len(picks) == request.count:
            return picks
    return None


def _place(
    geometry: Geometry,
    device: Device,
    used: DeviceUsage,
    count: int,
    need_mib: int,
    request: ContainerRequest,
    named: str | None = None,
) -> list[DeviceSlice]:
    """Up to *count* new instances on a dynamic MIG GPU, each where it blocks least."""
    return place_instances(
        geometry,
        device.id,
        device.index,
        used.partitions_in_use,
        count,
        need_mib,
        request.compute_percent,
        named,
    )


def _choose(
    request: ContainerRequest, candidates: list[Device], reasons: Counter[FitReason]
) -> list[Device] | None:
    k = request.count
    if len(candidates) < k:
        if candidates:
            reasons[FitReason.NOT_ENOUGH_FIT] += len(candidates)
        return None
    groups: list[list[Device]] = [candidates]
    if request.numa_bind:
        by_numa: dict[int | None, list[Device]] = {}
        for device in candidates:
            by_numa.setdefault(device.numa_node, []).append(device)
        groups = [g for g in by_numa.values() if len(g) >= k]
        if not groups:
            reasons[FitReason.NUMA_MISMATCH] += len(candidates)
            return None
    points = topology.pair_points(candidates)
    if k == 1 and request.topology_aware and len(candidates) > 1 and points:
        return [_least_connected(candidates, points)]
    best: list[Device] | None = None
    best_points = -1
    for group in groups:
        pick = best_subset(group, k, points)
        score = topology.set_points([d.id for d in pick], points)
        if score > best_points:
            best, best_points = pick, score
    return best


def _least_connected(candidates: list[Device], points: Mapping[tuple[str, str], int]) -> Device:
    """The candidate with the lowest sum of pair scores to the others; ties: the first."""
    ids = [d.id for d in candidates]
    sums = [sum(points.get((a, b), 0) for b in ids if b != a) for a in ids]
    return candidates[sums.index(min(sums))]


def best_subset(group: list[Device], k: int, points: Mapping[tuple[str, str], int]) -> list[Device]:
    """The *k* devices of *group* with the highest pair score; ties: earliest in order."""
    if k <= 1 or not points or len(group) == k:
        return group[:k]
    ids = [d.id for d in group]
    within = {points.get((a, b), 0) for i, a in enumerate(ids) for b in ids[i + 1 :]}
    if len(within) == 1:
        return group[:k]  # every pair alike (one NVSwitch fabric, one PCIe switch): no choice
    if math.comb(len(group), k) <= EXHAUSTIVE_LIMIT:
        # Pair scores by position, so each candidate set is summed from plain lists.
        matrix = [[points.get((a, b), 0) for b in ids] for a in ids]
        best_set: tuple[int, ...] = tuple(range(k))
        best_score = -1
        for combo in itertools.combinations(range(len(group)), k):
            score = 0
            for x, a in enumerate(combo):
                row = matrix[a]
                for b in combo[x + 1 :]:
                    score += row[b]
            if score > best_score:
                best_set, best_score = combo, score
        return [group[i] for i in best_set]
    return _greedy(group, k, points)


def _greedy(group: list[Device], k: int, points: Mapping[tuple[str, str], int]) -> list[Device]:
    best: list[Device] = group[:k]
    best_score = topology.set_points([d.id for d in best], points)
    for seed in group:
        chosen = [seed]
        while len(chosen) < k:
            rest = [d for d in group if d not in chosen]
            chosen.append(max(rest, key=lambda d: sum(points.get((d.id, c.id), 0) for c in chosen)))
        score = topology.set_points([d.id for d in chosen], points)
        if score > best_score:
            best, best_score = chosen, score
    order = {d.id: i for i, d in enumerate(group)}
    return sorted(best, key=lambda d: order[d.id])


def _fit_partition(
    request: ContainerRequest, ordered: list[Device], usage: Mapping[str, DeviceUsage]
) -> FitResult:
    """Free MIG instances of the requested profile, packed onto as few GPUs as possible."""
    profile = request.partition
    reasons: Counter[FitReason] = Counter()
    picks: list[DeviceSlice] = []
    for device in ordered:
        if len(picks) == request.count:
            break
        why = _constraints(request, device)
        if why is None and device.mode != MIG_MODE:
            why = FitReason.PARTITION_UNAVAILABLE
        used = usage.get(device.id, _EMPTY)
        if why is None and used.exclusive:
            why = FitReason.HELD_EXCLUSIVELY
        geometry = geometry_of(device.partitions) if why is None else None
        if geometry is not None:
            shape = geometry.by_name.get(profile or "")
            if shape is None:
                reasons[FitReason.PARTITION_UNAVAILABLE] += 1
            elif request.memory_mib is not None and request.memory_mib > shape.memory_mib:
                reasons[FitReason.INSUFFICIENT_MEMORY] += 1
            elif request.compute_percent > shape.compute_percent:
                reasons[FitReason.INSUFFICIENT_COMPUTE] += 1
            else:
                got = _place(
                    geometry, device, used, request.count - len(picks), 0, request, profile
                )
                if not got:
                    reasons[FitReason.PARTITION_UNAVAILABLE] += 1
                picks += got
            continue
        found = next((p for p in device.partitions if p.name == profile), None)
        if why is None and found is None:
            why = FitReason.PARTITION_UNAVAILABLE
        if why is not None or found is None:
            reasons[why or FitReason.PARTITION_UNAVAILABLE] += 1
            continue
        if request.memory_mib is not None and request.memory_mib > found.memory_mib:
            reasons[FitReason.INSUFFICIENT_MEMORY] += 1
            continue
        if request.compute_percent > found.compute_percent:
            reasons[FitReason.INSUFFICIENT_COMPUTE] += 1
            continue
        free = found.max_count - used.partitions_in_use.count(found.name)
        if free <= 0:
            reasons[FitReason.PARTITION_UNAVAILABLE] += 1
            continue
        take = min(free, request.count - len(picks))
        picks += [
            DeviceSlice(
                device_id=device.id,
                index=device.index,
                memory_mib=found.memory_mib,
                compute_percent=found.compute_percent,
                partition=found.name,
            )
        ] * take
    if len(picks) < request.count:
        if picks:
            reasons[FitReason.NOT_ENOUGH_FIT] += len(picks)
        result = FitResult(fits=False, reasons=dict(reasons))
        return result.model_copy(
            update={
                "message": f"no {request.count} free MIG instance(s) of profile "
                f"{profile}: {result.explain()}"
            }
        )
    return FitResult(fits=True, devices=tuple(picks), reasons=dict(reasons))


def score(
    request: ContainerRequest,
    node: NodeView,
    result: FitResult,
    usage: Mapping[str, DeviceUsage],
) -> float | None:
    """How well connected the GPUs this node gives *request* are, in [0, 1].

    ``None`` for one GPU, MIG instances, or a node without link facts. The set rated is the
    one :func:`fit` picks on this node, since the placer may pass the plain walk's picks;
    when that cannot be reproduced here (it is checked without memory over-commit), the
    given picks are rated.
    """
    if not result.fits:
        return None
    if any(d.mode == MIG_MODE and geometry_of(d.partitions) for d in node.devices):
        return _mig_score(request, node, usage)
    if request.partition is not None:
        return None
    by_id = {d.id: d for d in node.devices}
    chosen = [by_id[i] for i in dict.fromkeys(s.device_id for s in result.devices) if i in by_id]
    if len(chosen) < 2 or not any(d.links for d in chosen):
        return None
    if topology.has_nvlink(node.devices):
        order = [d.id for d in chosen]
        mine = _fit_shared(request, _ordered(node.devices, order), usage, 1.0)
        ids = list(dict.fromkeys(s.device_id for s in mine.devices))
        if mine.fits and len(ids) == len(chosen):
            chosen = [by_id[i] for i in ids]
    return topology.set_quality(chosen)


def _mig_score(
    request: ContainerRequest, node: NodeView, usage: Mapping[str, DeviceUsage]
) -> float | None:
    """How little the placement this node gives *request* shrinks what its MIG GPUs can
    still take, in [0, 1] (1: nothing lost).

    The loss on a GPU is how many compute slices the largest profile that still fits loses
    (:meth:`Geometry.room`), over the GPU's slices: a 1g instance on an empty A100 loses 3
    (7g to 4g), on one that holds a 3g at 4 it loses 2 (4g to 2g), so the second node is
    preferred and whole GPUs stay whole, the fragmentation measure of FGD applied to MIG.
    """
    mine = fit(request, node, usage, [], 1.0)
    if mine is None or not mine.fits:
        return None
    by_id = {d.id: d for d in node.devices}
    added: dict[str, list[str]] = {}
    for piece in mine.devices:
        added.setdefault(piece.device_id, []).append(piece.partition or "")
    losses = []
    for device_id, names in added.items():
        device = by_id.get(device_id)
        geometry = geometry_of(device.partitions) if device is not None else None
        if geometry is None or geometry.compute_slices <= 0:
            return None
        booked = usage.get(device_id, _EMPTY).partitions_in_use
        before = geometry.room(geometry.occupancy(booked))[0]
        after = geometry.room(geometry.occupancy((*booked, *names)))[0]
        losses.append(max(0, before - after) / geometry.compute_slices)
    return 1.0 - sum(losses) / len(losses)

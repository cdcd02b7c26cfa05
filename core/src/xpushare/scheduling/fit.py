"""The core's default fit: the sharing model every GPU-like vendor uses.

Checks follow HAMi's order (research/hami-protocol.md §5.1), per device: health, model
include/exclude, UUID include/exclude, share slots, exclusive holders, exclusive request on a
used device, partition profile, memory (MiB or percent, over-commit applied), compute, and
"0 % compute on a fully booked device". A request of all the compute is exclusive only on a
device that is not over-committed (HAMi's ``Totalcore == 100``), and NUMA binding takes the
first run of devices of one NUMA node, in the walk's order, that holds enough fitting ones,
restarting at each NUMA change as HAMi does. Differences from HAMi, on purpose:

* an exclusive request on a used device says so, instead of "not enough memory";
* a percent of memory is a percent of the physical device, not of the over-committed size.

A device whose profiles carry placements (dynamic MIG) gives a request that names no
profile the instance a vendor's fit would create (:func:`instance_for`, the NVIDIA fit's
rule), booked as ``"<profile>@<start>"``: the placement policies and the fragmentation
measures then weigh the layout that would really be made. (A vendor with such devices
decides with its own fit; this default is what the policies measure with.)

Every rejected device is counted under the first check it failed, so a user reading
``xpushare fit`` or a pod event learns why each device was skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xpushare.models import (
    ContainerRequest,
    DeviceSlice,
    DeviceUsage,
    FitReason,
    FitResult,
    NodeView,
)
from xpushare.scheduling.numa import BEFORE_NUMA, NumaRun
from xpushare.scheduling.partitions import Geometry, Occupancy, Shape, slot_name
from xpushare.scheduling.request import Demand, PodRequest
from xpushare.scheduling.state import (
    SIG_COMPUTE_CAP,
    SIG_FREE_COMPUTE,
    SIG_FREE_MEMORY,
    SIG_GEOMETRY,
    SIG_MEMORY,
    SIG_MODEL,
    SIG_OCCUPANCY,
    SIG_USABLE,
    SIG_WHOLE,
    DeviceState,
    DeviceTable,
    NodeState,
    booked_partition_signature,
    booked_signature,
)

#: One device given to one container: (device, MiB, compute percent, exclusive, partition).
Pick = tuple[DeviceState, int, int, bool, str | None]
#: Usage of earlier containers of the same pod, per device id: [slots, MiB, compute, excl].
Extra = dict[str, list[int]]
#: A policy's preferred device order for one demand on one table (None: inventory order).
DeviceOrder = Callable[[NodeState, DeviceTable, Demand], Sequence[DeviceState] | None]
#: A vendor's own fit for one demand: (node, table, demand, order, extra, full) -> picks, why,
#: and the vendor's own explanation of a refusal ("" for none: the reasons are summarised);
#: ``None`` leaves the demand to the default fit.
DemandFitter = Callable[
    [NodeState, DeviceTable, Demand, Sequence[DeviceState] | None, Extra | None, bool],
    tuple[list[Pick] | None, dict[FitReason, int], str] | None,
]

_NONE = (0, 0, 0, 0)
_NODE_WIDE = frozenset(
    {
        FitReason.TOO_FEW_DEVICES,
        FitReason.NOT_ENOUGH_FIT,
        FitReason.NO_DEVICES,
        FitReason.INSUFFICIENT_CPU,
        FitReason.INSUFFICIENT_HOST_MEMORY,
        FitReason.NUMA_MISMATCH,
        FitReason.VENDOR_ERROR,
    }
)


def quick_reject(table: DeviceTable, demand: Demand) -> FitReason | None:
    """A reason the demand cannot fit, read from the table's summaries; ``None``: maybe fits.

    Never rejects what the full check would accept: each test compares the demand with an
    upper bound of what any device offers.
    """
    count = demand.count
    if count > len(table.devices):
        return FitReason.TOO_FEW_DEVICES
    if count > table.n_healthy:
        # With cordoned devices the walk says which are which.
        return FitReason.UNHEALTHY if not table.n_cordoned else None
    if count > table.n_usable:
        if count > table.n_healthy - table.n_held:
            return FitReason.HELD_EXCLUSIVELY
        return FitReason.SLOTS_EXHAUSTED
    if (
        demand.idle or (demand.exclusive_on(table.sizes[2]) and table.uniform_sizes)
    ) and count > table.n_whole_free:
        # Exclusive only where every device is (an over-committed one shares it).
        return FitReason.EXCLUSIVE_CONFLICT
    if demand.partition is not None:
        return None
    if demand.compute > table.max_free_compute:
        return FitReason.INSUFFICIENT_COMPUTE
    if demand.memory_mib is not None:
        if demand.memory_mib > table.max_free_memory:
            return FitReason.INSUFFICIENT_MEMORY
    elif table.uniform_memory is not None and (
        demand.memory_for(table.uniform_memory) > table.max_free_memory
    ):
        return FitReason.INSUFFICIENT_MEMORY
    return None


def check_device(d: DeviceState, demand: Demand, extra: Extra | None) -> FitReason | Pick:
    """The first check *d* fails for *demand*, or what the demand would get on it."""
    used_slots = d.used_slots
    used_memory = d.used_memory
    used_compute = d.used_compute
    held = d.exclusive
    if extra:
        e = extra.get(d.id)
        if e is not None:
            used_slots += e[0]
            used_memory += e[1]
            used_compute += e[2]
            held += e[3]
    if not d.healthy:
        return FitReason.CORDONED if d.cordoned else FitReason.UNHEALTHY
    if (demand.include_models or demand.exclude_models) and not demand.model_allowed(d.model_key):
        return FitReason.MODEL_MISMATCH
    if (demand.include_uuids and d.id not in demand.include_uuids) or d.id in demand.exclude_uuids:
        return FitReason.UUID_MISMATCH
    if used_slots >= d.slots:
        return FitReason.SLOTS_EXHAUSTED
    if held:
        return FitReason.HELD_EXCLUSIVELY
    exclusive = demand.exclusive_on(d.compute_cap)
    if (exclusive or demand.idle) and used_slots > 0:
        return FitReason.EXCLUSIVE_CONFLICT
    compute = demand.compute
    partition = demand.partition
    geometry = d.geometry
    if geometry is not None and partition is None:
        placed = instance_for(geometry, _occupancy(d, geometry, extra), demand, d.memory_mib)
        if placed is None:
            return FitReason.PARTITION_UNAVAILABLE
        shape, start = placed
        return (d, shape.memory_mib, shape.compute_percent, False, slot_name(shape.name, start))
    if partition is not None:
        profile = d.partitions.get(partition)
        in_use = d.partitions_used.get(partition, 0)
        if extra:
            in_use += extra.get(f"{d.id}\0{partition}", _NONE)[0]
        if profile is None or in_use >= profile[2]:
            return FitReason.PARTITION_UNAVAILABLE
        need, compute = profile[0], profile[1]
    else:
        need = demand.memory_for(d.memory_mib)
    if d.memory_cap - used_memory < need:
        return FitReason.INSUFFICIENT_MEMORY
    if d.compute_cap - used_compute < compute:
        return FitReason.INSUFFICIENT_COMPUTE
    if compute == 0 and used_compute >= d.compute_cap:
        return FitReason.COMPUTE_EXHAUSTED
    return (d, need, compute, exclusive, partition)


def instance_for(
    geometry: Geometry, occ: Occupancy, demand: Demand, physical_mib: int
) -> tuple[Shape, int] | None:
    """The instance a dynamically partitioned device (dynamic MIG) gives *demand* (which
    names no profile): the whole-device profile for an exclusive demand or one asking all
    the memory, else the smallest that holds its memory and compute, at the start that
    blocks least (:meth:`Geometry.pick`, the NVIDIA fit's rule)."""
    need = demand.memory_for(physical_mib)
    whole = demand.exclusive or need >= physical_mib
    return geometry.pick(need, demand.compute, whole, occ)


def _occupancy(d: DeviceState, geometry: Geometry, extra: Extra | None) -> Occupancy:
    """The instances in use on *d*, with those the pod's earlier containers took there."""
    if not extra:
        return d.occupancy()
    prefix = f"{d.id}\0"
    names = list(d.partitions_used.elements())
    for key, booked in extra.items():
        if key.startswith(prefix):
            names.extend([key[len(prefix) :]] * booked[0])
    return geometry.occupancy(names)


def sig_booked(sig: tuple[Any, ...], demand: Demand) -> tuple[Any, ...] | None:
    """The signature a device in state *sig* would have with one part of *demand* booked
    as :func:`check_device` books it, or ``None`` if it cannot hold one (for the demands
    :func:`sig_can_host` decides)."""
    if not sig_can_host(sig, demand):
        return None
    if len(sig) > SIG_GEOMETRY:
        placed = instance_for(sig[SIG_GEOMETRY], sig[SIG_OCCUPANCY], demand, sig[SIG_MEMORY])
        assert placed is not None  # sig_can_host said so
        return booked_partition_signature(sig, *placed)
    need = demand.memory_for(sig[SIG_MEMORY])
    return booked_signature(sig, need, demand.compute, demand.exclusive_on(sig[SIG_COMPUTE_CAP]))


def sig_can_host(sig: tuple[Any, ...], demand: Demand) -> bool:
    """Whether a device in state *sig* could hold one part of *demand*.

    :func:`check_device` on the signature instead of the device: the same answer for
    demands without UUIDs or a partition (a test holds them together), which lets answers
    be shared by every device in one state.
    """
    if not sig[SIG_USABLE]:
        return False
    if (demand.include_models or demand.exclude_models) and not demand.model_allowed(
        sig[SIG_MODEL]
    ):
        return False
    if (demand.idle or demand.exclusive_on(sig[SIG_COMPUTE_CAP])) and not sig[SIG_WHOLE]:
        return False
    if demand.partition is not None:
        return False
    if len(sig) > SIG_GEOMETRY:
        occ: Occupancy = sig[SIG_OCCUPANCY]
        return instance_for(sig[SIG_GEOMETRY], occ, demand, sig[SIG_MEMORY]) is not None
    if sig[SIG_FREE_MEMORY] < demand.memory_for(sig[SIG_MEMORY]):
        return False
    free_compute: int = sig[SIG_FREE_COMPUTE]
    if free_compute < demand.compute:
        return False
    return not (demand.compute == 0 and free_compute <= 0)


def fit_demand(
    table: DeviceTable,
    demand: Demand,
    order: Sequence[DeviceState] | None = None,
    extra: Extra | None = None,
    *,
    full: bool = False,
) -> tuple[list[Pick] | None, dict[FitReason, int]]:
    """Pick ``demand.count`` devices of *table*, walking them in *order*.

    Returns the picks (``None`` if the demand does not fit) and the per-reason count of
    devices turned down. With ``full`` every device is examined, so the tally explains the
    whole node even when the demand fits; otherwise the walk stops at the last pick needed.
    """
    reasons: dict[FitReason, int] = {}
    devices = table.devices if order is None else order
    count = demand.count
    if count > len(table.devices):
        reasons[FitReason.TOO_FEW_DEVICES] = 1
        if not full:
            return None, reasons
    picks: list[Pick] = []
    run: NumaRun[Pick] | None = NumaRun(count) if demand.numa_bind else None
    done: list[Pick] | None = None
    for d in devices:
        result = check_device(d, demand, extra)
        if type(result) is FitReason:
            reasons[result] = reasons.get(result, 0) + 1
            if run is not None and done is None and result not in BEFORE_NUMA:
                run.meet(d.numa)
            continue
        if done is not None:
            continue
        pick: Pick = result  # type: ignore[assignment]
        if run is not None:
            run.meet(d.numa)
            if run.add(pick):
                done = run.picks
        else:
            picks.append(pick)
            if len(picks) == count:
                done = picks
        if done is not None and not full:
            break
    if done is not None and FitReason.TOO_FEW_DEVICES not in reasons:
        return done, reasons
    if run is not None and run.split():
        reasons[FitReason.NUMA_MISMATCH] = run.discarded
        return None, reasons
    if FitReason.TOO_FEW_DEVICES not in reasons:
        reasons[FitReason.NOT_ENOUGH_FIT] = 1
    return None, reasons


def add_extra(extra: Extra, picks: Sequence[Pick]) -> None:
    """Book *picks* in *extra*, so the next container of the pod sees them as used."""
    for d, memory, compute, exclusive, partition in picks:
        e = extra.setdefault(d.id, [0, 0, 0, 0])
        e[0] += 1
        e[1] += memory
        e[2] += compute
        e[3] += 1 if exclusive else 0
        if partition is not None:
            extra.setdefault(f"{d.id}\0{partition}", [0, 0, 0, 0])[0] += 1


@dataclass(slots=True)
class PodFit:
    """A whole pod against one node: the picks per demand, or why it does not fit."""

    fits: bool
    picks: list[tuple[Demand, list[Pick]]] = field(default_factory=list)
    reasons: dict[FitReason, int] = field(default_factory=dict)
    #: The demand that failed (``None`` for host resources or a fit).
    failed: Demand | None = None
    #: Devices examined for the failed demand, for "k/n devices" in messages.
    examined: int = 0
    #: The message, once built (answers are shared between nodes and read many times).
    text: str | None = None
    #: A vendor fit's own explanation of the refusal, which says more than its reasons can
    #: (NVIDIA: how many MIG instances of a profile are free); "" when there is none.
    note: str = ""

    def primary(self) -> FitReason | None:
        """The main reason it does not fit: a node-wide one, else the commonest per device."""
        if self.fits or not self.reasons:
            return None
        for r in self.reasons:
            if r in _NODE_WIDE and r is not FitReason.NOT_ENOUGH_FIT:
                return r
        devices = [(n, r) for r, n in self.reasons.items() if r not in _NODE_WIDE]
        if devices:
            return max(devices, key=lambda x: (x[0], x[1].value))[1]
        return next(iter(self.reasons))

    def message(self) -> str:
        """One line for a user: what failed and why, per reason."""
        if self.fits:
            return "fits"
        if self.text is None:
            self.text = summarize(self.reasons, self.examined, self.failed, self.note)
        return self.text


#: One shared answer per host reason: a node without the CPU or memory for a pod.
HOST_REJECTS = {
    reason: PodFit(False, reasons={reason: 1})
    for reason in (FitReason.INSUFFICIENT_CPU, FitReason.INSUFFICIENT_HOST_MEMORY)
}


def host_reject(node: NodeState, request: PodRequest) -> FitReason | None:
    """kube-scheduler's NodeResourcesFit: requests <= allocatable - requested."""
    cpu, memory = request.cpu_milli, request.memory_mib
    if cpu and node.cpu_alloc is not None and cpu > node.cpu_alloc - node.cpu_used:
        return FitReason.INSUFFICIENT_CPU
    if memory and node.memory_alloc is not None and memory > node.memory_alloc - node.memory_used:
        return FitReason.INSUFFICIENT_HOST_MEMORY
    return None


def fit_pod(
    node: NodeState,
    request: PodRequest,
    order: DeviceOrder | None = None,
    *,
    full: bool = False,
    quick: bool = True,
    custom: Mapping[str, DemandFitter] | None = None,
) -> PodFit:
    """Fit every container of *request* on *node* without changing it.

    Init containers run one after the other before the app containers, so each is fitted
    against the node as it is; app containers run together, so each sees the devices the
    ones before it took. With ``quick`` a demand is first checked against the table's
    summaries (the answer is the same; only the reason is coarser). *custom* maps a vendor
    to its own fit, used instead of the default for that vendor's demands unless it answers
    ``None``.
    """
    reason = host_reject(node, request)
    if reason is not None:
        return HOST_REJECTS[reason]
    extra: Extra = {}
    out: list[tuple[Demand, list[Pick]]] = []
    for demand in request.demands:
        table = node.tables.get(demand.vendor)
        if table is None or not table.devices:
            return PodFit(False, reasons={FitReason.NO_DEVICES: 1}, failed=demand)
        use = None if demand.init else extra
        fitter = custom.get(demand.vendor) if custom else None
        if quick and not use and not full and fitter is None:
            rejected = _quick_failure(table, demand)
            if rejected is not None:
                return rejected
        devices = order(node, table, demand) if order is not None else None
        answer = fitter(node, table, demand, devices, use, full) if fitter is not None else None
        note = ""
        if answer is None:
            picks, reasons = fit_demand(table, demand, devices, use, full=full)
        else:
            picks, reasons, note = answer
        if picks is None:
            return PodFit(
                False, reasons=reasons, failed=demand, examined=len(table.devices), note=note
            )
        out.append((demand, picks))
        if not demand.init:
            add_extra(extra, picks)
    return PodFit(True, picks=out)


def _quick_failure(table: DeviceTable, demand: Demand) -> PodFit | None:
    why = quick_reject(table, demand)
    if why is None:
        return None
    n = len(table.devices)
    return PodFit(False, reasons={why: n}, failed=demand, examined=n)


def fit_alone(table: DeviceTable, demand: Demand, *, quick: bool = True) -> PodFit:
    """:func:`fit_pod` for a pod whose one demand is *demand*, host resources checked.

    The placement engine's most frequent question, asked once per table state: without
    fit_pod's bookkeeping for several containers. ``quick=False``: no summary shortcut,
    as fit_pod answers where a vendor's own fit left the demand to the core.
    """
    if quick:
        rejected = _quick_failure(table, demand)
        if rejected is not None:
            return rejected
    picks, reasons = fit_demand(table, demand)
    if picks is None:
        return PodFit(False, reasons=reasons, failed=demand, examined=len(table.devices))
    return PodFit(True, picks=[(demand, picks)])


def summarize(
    reasons: Mapping[FitReason, int],
    examined: int = 0,
    demand: Demand | None = None,
    note: str = "",
) -> str:
    """'mock: 0/8 devices fit (5 not enough free device compute, 3 no free share slot ...)'.

    A vendor fit's *note* (its own explanation, which names its reasons) replaces the summary.
    """
    node_wide = [r for r in reasons if r in _NODE_WIDE]
    per_device = sorted(
        ((n, r) for r, n in reasons.items() if r not in _NODE_WIDE), key=lambda x: (-x[0], x[1])
    )
    parts: list[str] = []
    for r in node_wide:
        if r is FitReason.NUMA_MISMATCH:
            parts.append(f"{r.value} ({reasons[r]} fitting devices elsewhere)")
        elif r is not FitReason.NOT_ENOUGH_FIT:
            parts.append(r.value)
    if per_device:
        detail = ", ".join(f"{n} {r.value}" for n, r in per_device)
        parts.append(
            f"{examined - sum(n for n, _ in per_device)}/{examined} devices usable: {detail}"
            if examined
            else detail
        )
    elif FitReason.NOT_ENOUGH_FIT in reasons:
        parts.append(FitReason.NOT_ENOUGH_FIT.value)
    text = note or "; ".join(parts) or "does not fit"
    if demand is not None:
        who = f"container {demand.container!r} " if demand.container else ""
        text = f"{who}{demand.vendor} x{demand.count}: {text}"
    return text


# --------------------------------------------------------------------------------------------
# The hook-level form: pydantic in, pydantic out (vendors, `xpushare fit`, the CLI)
# --------------------------------------------------------------------------------------------


def table_from_view(
    vendor: str,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    memory_overcommit: float = 1.0,
    compute_overcommit: float = 1.0,
) -> DeviceTable:
    """A device table for *vendor*'s devices of *node*, with *usage* applied."""
    states = []
    for device in node.devices:
        if device.vendor != vendor:
            continue
        d = DeviceState.from_device(device, memory_overcommit, compute_overcommit)
        u = usage.get(device.id)
        if u is not None:
            d.used_slots = u.used_slots
            d.used_memory = u.used_memory_mib
            d.used_compute = u.used_compute_percent
            d.exclusive = 1 if u.exclusive else 0
            d.partitions_used.update(u.partitions_in_use)
        states.append(d)
    return DeviceTable(vendor, states)


def ordered(table: DeviceTable, device_order: Sequence[str]) -> list[DeviceState]:
    """The table's devices in *device_order* (ids), unknown ids ignored, the rest after."""
    seen: set[str] = set()
    out: list[DeviceState] = []
    for device_id in device_order:
        d = table.by_id.get(device_id)
        if d is not None and device_id not in seen:
            seen.add(device_id)
            out.append(d)
    out.extend(d for d in table.devices if d.id not in seen)
    return out


def slices(picks: Sequence[Pick]) -> tuple[DeviceSlice, ...]:
    return tuple(
        DeviceSlice(
            device_id=d.id,
            index=d.index,
            memory_mib=memory,
            compute_percent=min(100, compute if not exclusive else 100),
            exclusive=exclusive,
            partition=partition,
        )
        for d, memory, compute, exclusive, partition in picks
    )


def default_fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str] = (),
    memory_overcommit: float = 1.0,
    compute_overcommit: float = 1.0,
) -> FitResult:
    """The core's answer to ``xpushare_fit``: does *request* fit *node* given *usage*.

    Every device is examined, so ``reasons`` explains the whole node even when it fits.
    """
    table = table_from_view(request.vendor, node, usage, memory_overcommit, compute_overcommit)
    demand = Demand(request)
    if not table.devices:
        return FitResult(
            fits=False,
            reasons={FitReason.NO_DEVICES: 1},
            message=f"node {node.name} has no {request.vendor} devices",
        )
    picks, reasons = fit_demand(table, demand, ordered(table, device_order), full=True)
    if picks is None:
        return FitResult(
            fits=False,
            reasons=dict(reasons),
            message=summarize(reasons, len(table.devices), demand),
        )
    return FitResult(fits=True, devices=slices(picks), reasons=dict(reasons))

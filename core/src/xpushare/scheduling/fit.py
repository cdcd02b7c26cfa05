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

Here: a demand over a table's devices, a whole pod over a node, and the messages; the checks
of one device are devicefit.py's, the form the vendor hooks call is hookfit.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from xpushare.models import FitReason
from xpushare.scheduling.devicefit import Extra as Extra
from xpushare.scheduling.devicefit import Pick as Pick
from xpushare.scheduling.devicefit import check_device as check_device
from xpushare.scheduling.devicefit import instance_for as instance_for
from xpushare.scheduling.devicefit import quick_reject as quick_reject
from xpushare.scheduling.devicefit import sig_booked as sig_booked
from xpushare.scheduling.devicefit import sig_can_host as sig_can_host
from xpushare.scheduling.devicefit import slices as slices
from xpushare.scheduling.numa import BEFORE_NUMA, NumaRun
from xpushare.scheduling.request import Demand, PodRequest
from xpushare.scheduling.state import DeviceState, DeviceTable, NodeState

#: A policy's preferred device order for one demand on one table (None: inventory order).
DeviceOrder = Callable[[NodeState, DeviceTable, Demand], Sequence[DeviceState] | None]
#: A vendor's own fit for one demand: (node, table, demand, order, extra, full) -> picks, why,
#: and the vendor's own explanation of a refusal ("" for none: the reasons are summarised);
#: ``None`` leaves the demand to the default fit.
DemandFitter = Callable[
    [NodeState, DeviceTable, Demand, Sequence[DeviceState] | None, Extra | None, bool],
    tuple[list[Pick] | None, dict[FitReason, int], str] | None,
]

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
        if isinstance(result, FitReason):
            reasons[result] = reasons.get(result, 0) + 1
            if run is not None and done is None and result not in BEFORE_NUMA:
                run.meet(d.numa)
            continue
        if done is not None:
            continue
        pick = result
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

"""The vendors' own fits and scores, as the placement engine asks them.

A vendor may implement ``xpushare_fit`` (its own feasibility and device choice, e.g.
NVIDIA's MIG and NVLink) and ``xpushare_score``. The core's fit calls a vendor's through
the fitter built here, which passes the vendor only views (its node, the usage of the
devices it looks at) and checks what comes back against the node's table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from xpushare.errors import PluginError
from xpushare.models import ContainerRequest, DeviceUsage, FitReason, FitResult
from xpushare.scheduling import fit_demand
from xpushare.scheduling.fit import DemandFitter, DeviceOrder, Extra, Pick, slices

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xpushare.placement.results import Score
    from xpushare.plugins import PluginHost, VendorHandle
    from xpushare.scheduling import Demand, PodRequest, UsageLedger
    from xpushare.scheduling.state import DeviceState, DeviceTable, NodeState

log = logging.getLogger(__name__)

#: Requests marked topology-aware kept (one copy per request, not one per node asked).
MAX_TOLD = 4_096

#: What a vendor's fit answers for one demand on one node (``DemandFitter``'s result).
FitAnswer = tuple[list[Pick] | None, dict[FitReason, int], str] | None


def vendor_fit_applies(
    ledger: UsageLedger, handle: VendorHandle, node: str, table: DeviceTable
) -> bool:
    """Whether *handle*'s own fit may decide on *table* (``xpushare_fit_applies``).

    Asked once per table and kept on it: the ledger builds a new table when a node's
    inventory changes, so the answer never outlives the devices it was given.
    """
    applies = table.vendor_fit
    if applies is None:
        applies = table.vendor_fit = handle.fit_applies(ledger.devices(node, table.vendor))
    return applies


class VendorFits:
    """The vendors of *host* with a fit (``custom``) or a score (``scorers``) of their own.

    ``topology``: HAMi's topology-aware GPU policy is in effect; the vendors' fits are
    told so in the ``ContainerRequest`` and asked on every node.
    """

    def __init__(
        self,
        ledger: UsageLedger,
        host: PluginHost | None,
        *,
        score_weight: float,
        topology: bool,
    ) -> None:
        self.ledger = ledger
        self.topology = topology
        self.score_weight = score_weight
        self.custom: dict[str, VendorHandle] = {}
        self.scorers: dict[str, VendorHandle] = {}
        if host is not None:
            for name, handle in host.vendors.items():
                if handle.implements("xpushare_fit"):
                    self.custom[name] = handle
                if score_weight > 0 and handle.implements("xpushare_score"):
                    self.scorers[name] = handle
        self._told: dict[int, tuple[ContainerRequest, ContainerRequest]] = {}

    def fitters(self, request: PodRequest) -> dict[str, DemandFitter] | None:
        """The fits of *request*'s vendors that have their own (``None``: none has)."""
        if not self.custom:
            return None
        wanted = {v: self.fitter(h) for v, h in self.custom.items() if v in request.vendors}
        return wanted or None

    def _told_topology(self, request: ContainerRequest) -> ContainerRequest:
        """*request* marked topology-aware: one copy per request, not one per node asked."""
        hit = self._told.get(id(request))
        if hit is not None and hit[0] is request:
            return hit[1]
        if len(self._told) >= MAX_TOLD:
            self._told.clear()
        told = request.model_copy(update={"topology_aware": True})
        self._told[id(request)] = (request, told)
        return told

    def fitter(self, handle: VendorHandle) -> DemandFitter:
        """*handle*'s fit, called as the core's fit calls a vendor's."""
        ledger = self.ledger
        topology = self.topology

        def fitter(
            node: NodeState,
            table: DeviceTable,
            demand: Demand,
            order: Sequence[DeviceState] | None,
            extra: Extra | None,
            full: bool,
        ) -> FitAnswer:
            applies = vendor_fit_applies(ledger, handle, node.name, table)
            if not applies and demand.partition is None and demand.mode is None and not topology:
                # The vendor said its fit leaves such a node to the default: skip building
                # the views it would be given (tens of microseconds a node). A demand that
                # names a mode is the vendor's to judge: the core does not know modes, nor
                # what the vendor knows of its devices' links (topology-aware).
                return None
            usage = TableUsage(table, extra, idle=demand.idle)
            try:
                result = handle.own_fit(
                    request=self._told_topology(demand.request) if topology else demand.request,
                    node=ledger.node_view(node.name, demand.vendor),
                    usage=usage,
                    device_order=[d.id for d in (order or table.devices)],
                    memory_overcommit=ledger.memory_overcommit(demand.vendor),
                )
            except PluginError as exc:
                log.warning("vendor %s: fit on node %s failed: %s", handle.name, node.name, exc)
                return None, {FitReason.VENDOR_ERROR: 1}, ""
            if result is None:
                return None  # the vendor leaves it to the default fit on the prebuilt table
            if not result.fits:
                # The vendor's message goes on to /filter: it may say what no reason can.
                return None, dict(result.reasons or {FitReason.NOT_ENOUGH_FIT: 1}), result.message
            picks: list[Pick] = []
            for s in result.devices:
                d = table.by_id.get(s.device_id)
                if d is None:
                    return None, {FitReason.VENDOR_ERROR: 1}, ""
                picks.append((d, s.memory_mib, s.compute_percent, s.exclusive, s.partition))
            return picks, dict(result.reasons), ""

        return fitter

    def blend(
        self, request: PodRequest, keys: Mapping[str, Score], order: DeviceOrder
    ) -> dict[str, float]:
        """Mix the vendors' own scores (in [0, 1]) into the policy's, by the configured weight."""
        weight = self.score_weight
        ledger = self.ledger
        raw = {n: k[0] for n, k in keys.items()}
        low, high = min(raw.values()), max(raw.values())
        span = (high - low) or 1.0
        out: dict[str, float] = {}
        for name, s in raw.items():
            policy_part = (s - low) / span if high > low else 1.0
            vendor_scores = []
            for demand in request.demands:
                handle = self.scorers.get(demand.vendor)
                if handle is None:
                    continue
                node_view = ledger.node_view(name, demand.vendor)
                usage = ledger.device_usage(name, demand.vendor)
                state = ledger.node(name)
                if state is None:
                    continue
                table = state.tables.get(demand.vendor)
                if table is None:
                    continue
                picks, reasons = fit_demand(table, demand, order(state, table, demand))
                fit = FitResult(
                    fits=picks is not None, devices=slices(picks or []), reasons=dict(reasons)
                )
                try:
                    value = handle.score(
                        request=demand.request, node=node_view, fit=fit, usage=usage
                    )
                except PluginError:
                    value = None
                if value is not None:
                    vendor_scores.append(value)
            vendor_part = sum(vendor_scores) / len(vendor_scores) if vendor_scores else policy_part
            out[name] = (1 - weight) * policy_part + weight * vendor_part
        return out


class TableUsage(Mapping[str, DeviceUsage]):
    """Per-device usage of one table (plus the pod's earlier containers), built on access.

    A vendor's own fit usually looks at the usage of a few devices, or none when it leaves
    the request to the default fit; building every ``DeviceUsage`` up front cost more than
    the whole default fit.
    """

    __slots__ = ("_built", "_extra", "_idle", "_table")

    def __init__(self, table: DeviceTable, extra: Extra | None, idle: bool = False) -> None:
        self._table = table
        self._extra = extra
        #: HAMi's mutex: a device in use is shown without a free share slot, so the
        #: vendor's fit passes over it as the core's does.
        self._idle = idle
        self._built: dict[str, DeviceUsage] = {}

    def __getitem__(self, device_id: str) -> DeviceUsage:
        found = self._built.get(device_id)
        if found is not None:
            return found
        d = self._table.by_id[device_id]  # KeyError for a device not in the table
        u = d.to_usage()
        e_all = self._extra or {}
        e = e_all.get(device_id)
        if e is not None:
            # Partitions the pod's earlier containers took here (keys "<device>\0<profile>"):
            # a vendor placing partitions must not give their slices out twice.
            prefix = f"{device_id}\0"
            taken = tuple(
                k[len(prefix) :]
                for k, v in e_all.items()
                if k.startswith(prefix)
                for _ in range(v[0])
            )
            u = u.model_copy(
                update={
                    "used_slots": u.used_slots + e[0],
                    "used_memory_mib": u.used_memory_mib + e[1],
                    "used_compute_percent": u.used_compute_percent + e[2],
                    "exclusive": u.exclusive or e[3] > 0,
                    "partitions_in_use": u.partitions_in_use + taken,
                }
            )
        if self._idle and 0 < u.used_slots < d.slots:
            u = u.model_copy(update={"used_slots": d.slots})
        self._built[device_id] = u
        return u

    def __iter__(self) -> Iterator[str]:
        return (d.id for d in self._table.devices)

    def __len__(self) -> int:
        return len(self._table.devices)


__all__ = ["FitAnswer", "TableUsage", "VendorFits", "vendor_fit_applies"]

"""/filter's question, "which candidate nodes can take this pod", in about a microsecond a node.

Why not :meth:`Placer.filter` directly: the placer's verdict also orders each node's devices
and scores the node, which ``/filter`` does not need (``/prioritize`` and ``/bind`` do), and
that costs about 15 µs a node, 75 ms at 5,000 nodes. Feasibility is asked here with the same
fit (:func:`xpushare.scheduling.fit_pod`, the function the placer uses) but without an order,
and the answer is shared between nodes whose devices are in the same state: in a real
fleet most nodes of one model are alike (empty, full, or half full in the same way), so one
fit serves hundreds of nodes. The sharing is exact: it applies only to requests whose device
answer depends on nothing but what :meth:`DeviceTable.state_signature` captures (no UUID
constraints, no partitions, one app container per vendor), and everything else is fitted
per node and remembered in that node's memo until the node changes. A request's CPU and
host memory are checked per node first, as ``fit_pod`` does (a comparison of two integers),
so requests that ask for them share their device answers too: a stream of requests of new
shapes then costs one fit per node state, not one per node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from xpushare.models import FitReason
from xpushare.placement import UNKNOWN_NODE
from xpushare.placement.placer import vendor_fit_applies
from xpushare.scheduler.candidates import NO_TABLE, UNKNOWN, VENDOR_FIT, CandidateRows
from xpushare.scheduling import PodFit, fit_pod, host_reject
from xpushare.scheduling.fit import HOST_REJECTS
from xpushare.scheduling.state import cached_signature

if TYPE_CHECKING:
    from xpushare.placement import Placer
    from xpushare.plugins import VendorHandle
    from xpushare.scheduling import NodeState, PodRequest

#: Shared answers kept at most; a fleet has few distinct (request shape, node state) pairs,
#: and the cache is simply emptied when it grows past this (an entry is some 100 bytes, a
#: refusal's message 200 more: under 10 MB at the bound).
SHARED_LIMIT = 32_768
#: Ids of request shapes and node signatures kept at most (a request's key is a few hundred
#: bytes: 3 MB at the bound). Ids are never reissued, so past the bound the table is emptied
#: with the shared answers, and answers kept in the node memos under old ids age out of
#: them (``NodeState.memo_limit``).
IDS_LIMIT = 8_192

_MEMO = "xpushare.scheduler.feasible"
_SIGNATURE = "xpushare.scheduler.signature"
_ORDERED = "xpushare.scheduler.ordered"

Verdict = tuple[bool, str, FitReason | None]
#: A verdict's first item: whether the node fits.
_FLAG = itemgetter(0)
_FITS: Verdict = (True, "", None)
_UNKNOWN: Verdict = (False, UNKNOWN_NODE, FitReason.NO_DEVICES)
#: Candidate rows' codes for a node short of the pod's CPU or host memory (below the
#: markers of scheduler/candidates.py).
_SHORT_CPU = UNKNOWN - 1
_SHORT_MEMORY = UNKNOWN - 2
#: Calls with fewer candidates go node by node: below this the arrays' fixed cost (some
#: 30 µs) is more than the loop's.
ROWS_FROM = 32
#: The answer for a node without the pod's CPU or host memory, per reason (fit_pod's).
_HOST_VERDICTS: dict[FitReason, Verdict] = {
    reason: (False, fit.message(), reason) for reason, fit in HOST_REJECTS.items()
}


@dataclass
class Feasibility:
    fits: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, FitReason | None] = field(default_factory=dict)


def _from_verdicts(names: list[str], verdicts: list[tuple[bool, Any, Any]]) -> Feasibility:
    """The answer the placer's verdicts of *names* give (a refusal's message is built here,
    for the nodes that do not fit only)."""
    if all(map(_FLAG, verdicts)):  # the common answer, without a pass in Python
        # *names* itself: a copy touches every name (at 5,000 nodes, a pass of its own);
        # the extender never changes an answer's list in place.
        return Feasibility(fits=names)
    out = Feasibility(fits=[n for n, v in zip(names, verdicts, strict=True) if v[0]])
    if len(out.fits) < len(names):
        failed, reasons = out.failed, out.reasons
        for name, (fits, why, reason) in zip(names, verdicts, strict=True):
            if not fits:
                failed[name] = why.message() if isinstance(why, PodFit) else str(why)
                reasons[name] = reason
    return out


def _shareable(request: PodRequest) -> bool:
    """Whether the device part of the answer depends on the node's table signatures alone
    (host resources are checked per node before, see :meth:`FeasibilityChecker.check`)."""
    seen: set[str] = set()
    for d in request.demands:
        if d.include_uuids or d.exclude_uuids or d.partition is not None or d.mode is not None:
            return False
        if not d.init:
            if d.vendor in seen:
                return False
            seen.add(d.vendor)
    return True


def _order_shareable(request: PodRequest) -> bool:
    """Whether the answer depends on the node's devices' states in inventory order alone:
    :func:`_shareable` but for several app containers of one vendor, which the fit places
    one after the other, first fit first (so the order matters, and is kept)."""
    return not any(
        d.include_uuids or d.exclude_uuids or d.partition is not None or d.mode is not None
        for d in request.demands
    )


class FeasibilityChecker:
    """Feasibility of pods on nodes, for the ledger and vendors of one :class:`Placer`."""

    def __init__(self, placer: Placer) -> None:
        self.placer = placer
        self._shared: dict[tuple[int, int], Verdict] = {}
        self._ids: dict[Any, int] = {}
        self._next_id = 0
        #: Per vendor set, node name -> (node state, its version, state id). Entries of
        #: removed nodes are dropped when the table is emptied with the shared answers.
        self._sids: dict[tuple[str, ...], dict[str, tuple[NodeState, int, int]]] = {}
        host = placer.host
        self._custom = (
            {n for n, h in host.vendors.items() if h.implements("xpushare_fit")} if host else set()
        )
        self._rows: CandidateRows | None = None

    def rows(self) -> CandidateRows:
        """The per-node arrays of the common path (built on first need: numpy's import)."""
        if self._rows is None:
            rows = CandidateRows(self.placer.ledger)
            host, ledger = self.placer.host, self.placer.ledger
            for vendor in self._custom:
                handle = host.vendors[vendor] if host else None
                if handle is not None:
                    rows.vendor_fit[vendor] = lambda name, table, handle=handle: vendor_fit_applies(
                        ledger, handle, name, table
                    )
            self._rows = rows
        return self._rows

    def key_of(self, request: PodRequest) -> int:
        """A small integer standing for the request's shape (cheap to hash in memos)."""
        return self._id(request.key)

    def _id(self, value: Any) -> int:
        # Never reissued, so an id in a node's memo can not come to mean something else
        # after the table is emptied.
        found = self._ids.get(value)
        if found is None:
            if len(self._ids) >= IDS_LIMIT:
                self._forget()
            found = self._ids[value] = self._next_id
            self._next_id += 1
        return found

    def _forget(self) -> None:
        """Empty the tables keyed by ids (the shared answers and the node signatures)."""
        self._shared.clear()
        self._ids.clear()
        for sids in self._sids.values():
            sids.clear()

    def _ordered_id(self, state: NodeState, vendors: tuple[str, ...]) -> int:
        """An id standing for *state*'s device tables of *vendors*, each device's state in
        inventory order; kept in the node's memo, which a change of the node replaces."""
        key = (_ORDERED, vendors)
        found: int | None = state.memo.get(key)
        if found is None:
            tables = state.tables
            signature = tuple(
                tuple(map(cached_signature, t.devices)) if (t := tables.get(v)) else None
                for v in vendors
            )
            found = self._id((_ORDERED, signature))
            state.remember(key, found)
        return found

    def _fit(self, state: NodeState, request: PodRequest) -> Verdict:
        fit = fit_pod(state, request, None)
        if fit.fits:
            return _FITS  # one object for every answer kept: most answers are this one
        return (False, fit.message(), fit.primary())

    def _shared_fit(
        self,
        shared: dict[tuple[int, int], Verdict],
        rid: int,
        sid: int,
        state: NodeState,
        request: PodRequest,
    ) -> Verdict:
        """The answer nodes in state *sid* share for request *rid*, fitted on first need."""
        verdict = shared.get((rid, sid))
        if verdict is None:
            verdict = self._fit(state, request)
            if len(shared) >= SHARED_LIMIT:
                self._forget()
            shared[(rid, sid)] = verdict
        return verdict

    def check(
        self,
        request: PodRequest,
        names: Iterable[str],
        *,
        observe: bool = True,
        scored: bool = False,
    ) -> Feasibility:
        """Which of *names* fit; ``observe=False`` asks without teaching the policy the
        request's shape (the web view's what-if: a look is not a pod to learn from).

        ``scored``: /filter's call. Where the placer remembers the verdicts (scores
        included) of nearly all of *names*, they answer, and the placer keeps them for the
        /prioritize of the same pod (:meth:`Placer.warm_verdicts`); the check below
        answers the rest (a new pod shape: every node's verdict to work out).
        """
        if scored and isinstance(names, list):
            if observe:
                self.placer.observe(request)
                observe = False
            verdicts = self.placer.warm_verdicts(request, names)
            if verdicts is not None:
                return _from_verdicts(names, verdicts)
        custom = self._custom & request.vendors
        if custom and len(request.vendors) == 1 and _shareable(request):
            # A vendor with its own fit, which it may have said applies to some nodes only
            # (``xpushare_fit_applies``): the others are answered by the core's shared fit.
            if observe:
                self.placer.observe(request)
            out = Feasibility()
            (vendor,) = request.vendors
            handle = self.placer.host.vendors[vendor] if self.placer.host else None
            self._check_by_table(
                out, request, names, self._id(request.key), vendor, self._shared, handle
            )
            return out
        if custom:
            # A vendor with its own fit: ask the placer, which calls it.
            result = self.placer.filter(request, names, observe=observe)
            out = Feasibility(fits=result.fits, failed=result.failed)
            nodes = self.placer.ledger.nodes
            for name in result.failed:
                state = nodes.get(name)
                out.reasons[name] = (
                    self.placer.verdict(state, request)[2] if state else FitReason.NO_DEVICES
                )
            return out
        if observe:
            self.placer.observe(request)
        out = Feasibility()
        nodes = self.placer.ledger.nodes
        # Small integers stand for the request shape and for node states: hashing the nested
        # tuples themselves for every node would cost more than the fit they save.
        rid = self._id(request.key)
        key = (_MEMO, rid)
        vendors = tuple(sorted(request.vendors))
        shared = self._shared if _shareable(request) else None
        # A pod of several containers of one vendor: one fit per node state, the devices'
        # states in inventory order (a pod of 200 containers against 200 alike nodes cost
        # 200 fits of 200 containers; it costs one).
        ordered = self._shared if shared is None and _order_shareable(request) else None
        host = bool(request.cpu_milli or request.memory_mib)
        if shared is not None and len(vendors) == 1:
            self._check_by_table(out, request, names, rid, vendors[0], shared)
            return out
        fits, failed, reasons = out.fits, out.failed, out.reasons
        # Answers of this call by node-state id: no allocation per node on the common path.
        local: dict[int, Verdict] = {}
        sids = self._sids.setdefault(vendors, {})
        for name in names:
            state = nodes.get(name)
            if state is None:
                failed[name] = UNKNOWN_NODE
                reasons[name] = FitReason.NO_DEVICES
                continue
            verdict: Verdict | None
            if host and (reason := host_reject(state, request)) is not None:
                verdict = _HOST_VERDICTS[reason]  # fit_pod's first check, the same answer
            elif shared is not None:
                # The node's state id, recomputed only after the node changed.
                known = sids.get(name)
                if known is not None and known[0] is state and known[1] == state.version:
                    sid = known[2]
                else:
                    tables = state.tables
                    signature = tuple(
                        t.state_signature() if (t := tables.get(v)) is not None else None
                        for v in vendors
                    )
                    sid = self._id((_SIGNATURE, signature))
                    sids[name] = (state, state.version, sid)
                verdict = local.get(sid)
                if verdict is None:
                    verdict = local[sid] = self._shared_fit(shared, rid, sid, state, request)
            else:
                verdict = state.memo.get(key)
                if verdict is None:
                    if ordered is not None:
                        oid = self._ordered_id(state, vendors)
                        verdict = local.get(oid)
                        if verdict is None:
                            verdict = local[oid] = self._shared_fit(
                                ordered, rid, oid, state, request
                            )
                    else:
                        verdict = self._fit(state, request)
                    state.remember(key, verdict)
            if verdict[0]:
                fits.append(name)
            else:
                failed[name] = verdict[1]
                reasons[name] = verdict[2]
        return out

    def _check_by_table(
        self,
        out: Feasibility,
        request: PodRequest,
        names: Iterable[str],
        rid: int,
        vendor: str,
        shared: dict[tuple[int, int], Verdict],
        handle: VendorHandle | None = None,
    ) -> None:
        """:meth:`check`'s loop for the common request: one vendor, nothing per node.

        The hot loop of /filter (500 candidates a call): past the host check (the pod's CPU
        and memory, fit_pod's first), the answer depends on the vendor's device table alone,
        and the table keeps its own state id (``DeviceTable.sig_id``, reset on every
        change), so a node costs two lookups and no signature bookkeeping.
        With *handle* (a vendor with its own fit), nodes whose table that fit applies to are
        asked through the placer, which calls it; the others are the core's, as above.
        """
        if not isinstance(names, list):
            names = list(names)
        if len(names) >= ROWS_FROM:
            self._check_by_rows(out, request, names, rid, vendor, shared)
            return
        nodes = self.placer.ledger.nodes
        ledger = self.placer.ledger
        host = bool(request.cpu_milli or request.memory_mib)
        fits, failed, reasons = out.fits, out.failed, out.reasons
        local: dict[int, Verdict] = {}
        for name in names:
            state = nodes.get(name)
            if state is None:
                failed[name] = UNKNOWN_NODE
                reasons[name] = FitReason.NO_DEVICES
                continue
            if host and (reason := host_reject(state, request)) is not None:
                failed[name], reasons[name] = _HOST_VERDICTS[reason][1:]
                continue
            table = state.tables.get(vendor)
            if table is None:
                sid = -1  # no device of the vendor: every such node has the same answer
            elif handle is not None and vendor_fit_applies(ledger, handle, name, table):
                placed = self.placer.verdict(state, request)
                if placed[0]:
                    fits.append(name)
                else:
                    why = placed[1]
                    failed[name] = why.message() if isinstance(why, PodFit) else str(why)
                    reasons[name] = placed[2]
                continue
            else:
                known = table.sig_id
                sid = known if known is not None else table.state_id()
            verdict = local.get(sid)
            if verdict is None:
                verdict = local[sid] = self._shared_fit(shared, rid, sid, state, request)
            if verdict is _FITS:
                fits.append(name)
            else:
                failed[name] = verdict[1]
                reasons[name] = verdict[2]

    def _check_by_rows(
        self,
        out: Feasibility,
        request: PodRequest,
        names: list[str],
        rid: int,
        vendor: str,
        shared: dict[tuple[int, int], Verdict],
    ) -> None:
        """:meth:`_check_by_table` on the candidate rows: the same answers, one Python step
        per distinct answer (scheduler/candidates.py says why), and one per node whose
        vendor's own fit decides (asked through the placer, as node by node)."""
        rows = self.rows()
        rows.sync()
        np = rows.np
        idx = rows.lookup(names)
        codes = rows.vendor(vendor)[idx]  # an unknown name's -1 reads the spare row: UNKNOWN
        if request.memory_mib or request.cpu_milli:
            # fit_pod's first check, CPU before memory, as host_reject answers.
            alive = codes != UNKNOWN
            if request.memory_mib:
                codes[alive & (rows.memory_free[idx] < request.memory_mib)] = _SHORT_MEMORY
            if request.cpu_milli:
                codes[alive & (rows.cpu_free[idx] < request.cpu_milli)] = _SHORT_CPU
        # The distinct codes (a sort and a comparison: half np.unique's time on 500 rows,
        # and most calls meet a handful of node states).
        ordered = np.sort(codes)
        distinct = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))].tolist()
        states = rows.states
        verdicts: list[Verdict | None] = []
        known_answer = shared.get
        for code in distinct:
            if code == VENDOR_FIT:
                verdicts.append(None)  # node by node, below
            elif code >= NO_TABLE and (verdict := known_answer((rid, code))) is not None:
                verdicts.append(verdict)  # the common case: this state was fitted before
            elif code == UNKNOWN:
                verdicts.append(_UNKNOWN)
            elif code == _SHORT_CPU:
                verdicts.append(_HOST_VERDICTS[FitReason.INSUFFICIENT_CPU])
            elif code == _SHORT_MEMORY:
                verdicts.append(_HOST_VERDICTS[FitReason.INSUFFICIENT_HOST_MEMORY])
            else:  # a table's state id, or NO_TABLE: fitted once, shared by the state's nodes
                state = states[int(idx[int(np.argmax(codes == code))])]
                assert state is not None
                verdicts.append(self._shared_fit(shared, rid, code, state, request))
        if len(distinct) == 1:
            if verdicts[0] is _FITS:
                out.fits.extend(names)  # every candidate in one state, which fits
                return
            which = np.zeros(len(names), dtype=np.intp)
        else:
            which = np.searchsorted(np.array(distinct, dtype=codes.dtype), codes)
        fitting = np.array([v is _FITS for v in verdicts], dtype=bool)[which]
        own: dict[int, Verdict] = {}
        for at in np.flatnonzero(codes == VENDOR_FIT).tolist():
            state = states[int(idx[at])]
            assert state is not None
            placed = self.placer.verdict(state, request)
            if placed[0]:
                fitting[at] = True
            else:
                why = placed[1]
                message = why.message() if isinstance(why, PodFit) else str(why)
                own[at] = (False, message, placed[2])
        if fitting.all():
            out.fits.extend(names)
            return
        out.fits.extend(compress(names, fitting.tolist()))
        failed, reasons = out.failed, out.reasons
        for at in np.flatnonzero(~fitting).tolist():
            verdict = own.get(at) or verdicts[int(which[at])]
            assert verdict is not None
            name = names[at]
            failed[name] = verdict[1]
            reasons[name] = verdict[2]

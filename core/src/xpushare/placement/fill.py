"""Working out verdicts: fit each node that has none for a request, score the fitting ones
in one call, and keep each answer where :class:`~xpushare.placement.memo.MemoKeys` says.

Why these shortcuts (each measured on bench_placement and the openb replay):

* a node's answer depends only on its state when the core's fit decides and the policy is
  state-pure, so such answers are worked out for one node per state and kept in the dict
  every node in that state shares (``NodeState.shared``, swapped by the ledger when the node
  changes);
* a one-container pod's feasibility is read from the node's kinds of devices (one answer per
  device signature) or the table summaries (a full node rejected in O(1)); the device walk
  runs only where it does not fit, to say why;
* the policy scores every fitting node in one ``Policy.score_many`` call, which the
  fragmentation policies run on arrays;
* refusals alike, and scores equal, share one verdict tuple: a memo entry then costs a
  pointer, and the ranking works per distinct verdict.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xpushare.models import FitReason
from xpushare.placement.results import LOWEST, Score, Verdict, score_key
from xpushare.placement.vendorfit import vendor_fit_applies
from xpushare.scheduling import PodFit, Policy, fit_pod, host_reject, quick_reject
from xpushare.scheduling.fit import HOST_REJECTS, fit_alone, sig_can_host
from xpushare.scheduling.state import remember

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xpushare.placement.memo import MemoKeys
    from xpushare.placement.vendorfit import VendorFits
    from xpushare.scheduling import Demand, PodRequest, UsageLedger
    from xpushare.scheduling.state import NodeState

log = logging.getLogger(__name__)

#: Bound of the answers kept per (device-table state, request shape); past it they are
#: dropped and recomputed. A fit answer holds its picks and the request's demand, 1-2 KB
#: (some 12 MB at the bound); a fleet has a few hundred table states per request shape, and
#: the openb replay, which keeps ~23,000 over its run, runs as fast with 8,192 (measured).
MAX_STATE_ANSWERS = 8_192

#: Requests whose per-device-state fit answers are kept (a few entries each).
MAX_REQUEST_KINDS = 10_000

#: A node's answers shared with its state (C-level, for map()).
shared_of: Callable[[NodeState], dict[Any, Any]] = operator.attrgetter("shared")


class Filler:
    """Works out and remembers the verdicts of nodes that have none for a request."""

    def __init__(
        self,
        ledger: UsageLedger,
        policy: Policy,
        keys: MemoKeys,
        vendors: VendorFits,
        core_mark: object,
    ) -> None:
        self.ledger = ledger
        self.policy = policy
        self.keys = keys
        self.vendors = vendors
        #: The mark left on nodes the core decides for all of :attr:`vendors`' own fits.
        self.core_mark = core_mark
        self._tiebreaks = type(policy).tiebreak is not Policy.tiebreak
        self._by_state: dict[tuple[int, int], PodFit] = {}
        self._kinds: dict[int, dict[tuple[Any, ...], bool]] = {}

    def fill(self, request: PodRequest, key: int, nodes: Sequence[NodeState]) -> None:
        """Work out and remember the verdicts of *nodes*, which have none for *request*.

        Where the answer depends on the node's state alone, it is worked out once per state
        (nodes in one state share one dict of answers, ``NodeState.shared``).
        """
        keys = self.keys
        if not keys.share[key]:
            if keys.pure and keys.core_decides_somewhere(request):
                self._fill_where_core_decides(request, key, nodes)
            else:
                self.answer(request, key, nodes)
            return
        # One node per shared dict (comprehensions: at 5,000 nodes each Python statement
        # per node costs a millisecond).
        firsts = dict(zip(map(id, map(shared_of, reversed(nodes))), reversed(nodes), strict=True))
        todo = [node for node in firsts.values() if key not in node.shared]
        if todo:
            self.answer(request, key, todo)

    def mark(self, node: NodeState) -> None:
        """Leave :attr:`core_mark` on *node* when the core's fit decides on each of its
        tables that a vendor with a fit of its own owns (each table asked once)."""
        ledger = self.ledger
        custom = self.vendors.custom
        for vendor, table in node.tables.items():
            handle = custom.get(vendor)
            if handle is not None and vendor_fit_applies(ledger, handle, node.name, table):
                return
        node.core_mark = self.core_mark

    def _fill_where_core_decides(
        self, request: PodRequest, key: int, nodes: Sequence[NodeState]
    ) -> None:
        """:meth:`fill` for a vendor with its own fit: nodes where the core decides share one
        answer per state (kept with the state's shared answers, so nodes that come to that
        state later find it), the others are answered one by one.

        Why: NVIDIA's fit applies only to MIG and NVLink nodes (its ``xpushare_fit_applies``),
        yet a vendor with a fit of its own made every verdict a per-node one, so each node
        that changed cost a fit and a score for every pod shape asked (in bench_throughput's
        NVIDIA run, the largest part of ``/prioritize``).
        """
        own: list[NodeState] = []
        waiting: list[NodeState] = []
        mark = self.core_mark
        # Nodes marked as the core's for every vendor with a fit of its own (most, once
        # their tables were asked) need no per-node step: they read their state's shared
        # answers (VerdictCache.read), so only the states without one are worked out.
        marked = [n for n in nodes if n.core_mark is mark]
        rest = [n for n in nodes if n.core_mark is not mark] if len(marked) < len(nodes) else []
        # The request's vendors with a fit of their own, once per call; per node, the
        # table's cached answer is read inline (this loop meets every unmarked candidate
        # whose memo lacks the request).
        custom = self.vendors.custom
        own_fits = [
            (d.vendor, handle)
            for d in request.demands
            if (handle := custom.get(d.vendor)) is not None
        ]
        ledger = self.ledger
        for node in rest:
            decides = True
            for vendor, handle in own_fits:
                table = node.tables.get(vendor)
                if table is not None:
                    applies = table.vendor_fit
                    if applies is None:
                        applies = vendor_fit_applies(ledger, handle, node.name, table)
                    if applies:
                        decides = False
                        break
            if not decides:
                own.append(node)
                continue
            self.mark(node)
            if node.core_mark is mark:
                marked.append(node)
                continue
            # The core's for this request's vendors, not for another of the node's: it
            # reads its own memo, which gets its state's answer.
            found = node.shared.get(key)
            if found is None:
                waiting.append(node)
            else:
                remember(node.memo, key, found, node.memo_limit)
        if marked or waiting:
            # One node per state without an answer (waiting nodes lack one already).
            unanswered = [n for n in marked if key not in n.shared]
            unanswered += waiting
            firsts = dict(zip(map(id, map(shared_of, unanswered)), unanswered, strict=True))
            todo = list(firsts.values())
            if todo:
                self.answer(request, key, todo, core=True)  # kept with the states' answers
            for node in waiting:
                remember(node.memo, key, node.shared[key], node.memo_limit)
        if own:
            self.answer(request, key, own)

    def answer(
        self, request: PodRequest, key: int, nodes: Sequence[NodeState], *, core: bool = False
    ) -> None:
        """Fit each node, then score the ones that fit in one call; remembered.

        ``core``: the vendors' own fits leave every one of *nodes* to the core's
        (:meth:`_fill_where_core_decides`), so a one-container pod takes the shared path
        of a vendor without a fit of its own: the table summaries and the policy's arrays
        decide. Refusals then walk the devices as the vendor's path does (no summary
        shortcut), so they read the same. The verdicts are kept with the nodes' states'
        answers (``NodeState.shared``), which such nodes read.
        """
        out: list[Verdict | None] = [None] * len(nodes)
        scoring: list[int] = []
        demands = request.demands
        single = (
            len(demands) == 1 and not demands[0].init and (core or self.keys.shareable(request))
        )
        # Refusals alike (same reasons, count and failing demand, so the same message) share
        # one verdict: a memo entry then costs a pointer, not a fit per node.
        refused: dict[tuple[Any, ...], Verdict] = {}
        if single:
            self._fit_each(request, demands[0], key, nodes, out, scoring, refused, core)
        else:
            fitters = self.vendors.fitters(request)
            for i, node in enumerate(nodes):
                fit = fit_pod(node, request, custom=fitters)
                if fit.fits:
                    scoring.append(i)
                    continue
                alike = (tuple(fit.reasons.items()), fit.examined, id(fit.failed))
                found = refused.get(alike)
                if found is None:
                    found = refused[alike] = (False, fit, fit.primary())
                out[i] = found
        if scoring:
            self._score(request, key, nodes, scoring, out, single=single, core=core)
        share = core or self.keys.share[key]
        for node, v in zip(nodes, out, strict=True):
            memo = node.shared if share else node.memo
            if len(memo) >= node.memo_limit:  # state.remember(), inline: once per node
                del memo[next(iter(memo))]
            memo[key] = v

    def _fit_each(
        self,
        request: PodRequest,
        demand: Demand,
        key: int,
        nodes: Sequence[NodeState],
        out: list[Verdict | None],
        scoring: list[int],
        refused: dict[tuple[Any, ...], Verdict],
        core: bool,
    ) -> None:
        """:meth:`answer`'s fit of a one-container pod: nodes that fit go to *scoring*, the
        others get their refusal in *out*."""
        fit_in_score = self.policy.fits_in_score
        kinds = None if fit_in_score else self._kind_fits(key, demand)
        vendor, count = demand.vendor, demand.count
        for i, node in enumerate(nodes):
            if fit_in_score:
                # The policy tells which nodes' devices cannot take the pod (answering
                # None): here only the host resources and the table summaries (O(1)) are
                # checked, which turn most nodes away when few can take the pod.
                reason = host_reject(node, request)
                if reason is not None:
                    out[i] = (False, HOST_REJECTS[reason], reason)
                    continue
                table = node.tables.get(vendor)
                if table is not None and quick_reject(table, demand) is None:
                    scoring.append(i)
                    continue
            if kinds is not None and host_reject(node, request) is None:
                # The fit read from the node's kinds of devices: any ``count`` devices
                # that each fit (the device walk below runs only where it does not, to
                # say why).
                table = node.tables.get(vendor)
                usable = 0
                if table is not None:
                    for sig, n in table.kind_counts or table.kinds():
                        ok = kinds.get(sig)
                        if ok is None:
                            ok = kinds[sig] = sig_can_host(sig, demand)
                        if ok:
                            usable += n
                if usable >= count:
                    scoring.append(i)
                    continue
            fit = self.fit_single(node, request, demand, key, quick=not core)
            if fit.fits:
                scoring.append(i)
            else:
                # The message is built when someone reads it (filter), not for every node.
                alike = (tuple(fit.reasons.items()), fit.examined, id(fit.failed))
                found = refused.get(alike)
                if found is None:
                    found = refused[alike] = (False, fit, fit.primary())
                out[i] = found

    def _score(
        self,
        request: PodRequest,
        key: int,
        nodes: Sequence[NodeState],
        scoring: list[int],
        out: list[Verdict | None],
        *,
        single: bool,
        core: bool,
    ) -> None:
        """:meth:`answer`'s scoring: the policy scores the nodes at *scoring* in one call."""
        scores = self.policy.score_many([nodes[i] for i in scoring], request)
        # Nodes with equal scores share one verdict, so a memo entry costs a pointer, not
        # a tuple per node. Not with a tie-break: that is worked out for one node of each
        # distinct verdict and given to all its nodes (Ranker.keys_by_verdict).
        same: dict[Score, Verdict] | None = None if self._tiebreaks else {}
        # And by the policy's value as given: a third of a fill's nodes repeat one
        # (fgd-cpu, bench_placement), and the lookup spares its key's rounding. Equal
        # values have equal keys (rounding is a function of the value; 0.0 and -0.0,
        # or 1 and 1.0, already shared one verdict through their equal keys).
        given: dict[Any, Verdict] = {}
        for i, value in zip(scoring, scores, strict=True):
            if value is not None:
                if same is None:
                    out[i] = (True, score_key(value), None)
                    continue
                found = given.get(value)
                if found is None:
                    score = score_key(value)
                    found = same.get(score)
                    if found is None:
                        found = same[score] = (True, score, None)
                    given[value] = found
                out[i] = found
                continue
            why = (
                self.fit_single(nodes[i], request, request.demands[0], key, quick=not core)
                if single
                else None
            )
            if why is None or why.fits:  # the policy disagrees: never turn a node away
                log.warning("policy %s: no score for a node the pod fits", self.policy.name)
                out[i] = (True, LOWEST, None)
            else:
                out[i] = (False, why, why.primary())

    def _kind_fits(self, key: int, demand: Demand) -> dict[tuple[Any, ...], bool] | None:
        """Whether a device in each state (signature) fits *demand*, filled as met; ``None``
        when a signature does not decide it (partitions; NUMA-bound multi-device demands)."""
        if demand.partition is not None or (demand.numa_bind and demand.count > 1):
            return None
        found = self._kinds.get(key)
        if found is None:
            if len(self._kinds) >= MAX_REQUEST_KINDS:
                self._kinds.clear()
            found = self._kinds[key] = {}
        return found

    def fit_single(
        self, node: NodeState, request: PodRequest, demand: Demand, key: int, *, quick: bool = True
    ) -> PodFit:
        """Feasibility of a one-container pod, shared between nodes in the same device state.

        Where the pod goes on the node does not matter here (the winner's devices are chosen
        by ``Placer.decide``), so nodes whose tables have the same signature get one answer.
        ``quick=False``: without the table summaries' shortcut, as :func:`fit_pod` answers
        for a vendor with a fit of its own (its refusals count every device's reason). A
        key is asked one way only (by whether its vendors have fits of their own), so the
        answers kept under it agree.
        """
        reason = host_reject(node, request)
        if reason is not None:
            return HOST_REJECTS[reason]
        table = node.tables.get(demand.vendor)
        if table is None or not table.devices:
            return PodFit(False, reasons={FitReason.NO_DEVICES: 1}, failed=demand)
        skey = (table.state_id(), key)
        fit = self._by_state.get(skey)
        if fit is None:
            if len(self._by_state) >= MAX_STATE_ANSWERS:
                self._by_state.clear()
            fit = self._by_state[skey] = fit_alone(table, demand, quick=quick)
        return fit


__all__ = ["MAX_REQUEST_KINDS", "MAX_STATE_ANSWERS", "Filler", "shared_of"]

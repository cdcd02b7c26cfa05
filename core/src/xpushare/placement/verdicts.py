"""The verdict cache: the one interface through which the placement engine asks whether a
request fits each node and how well, however that answer is worked out or remembered.

Contract (``VerdictCache``):

* **Input**: a :class:`~xpushare.scheduling.PodRequest` and node names (or node states) of
  the ledger the cache was built on.
* **Output**: one :data:`~xpushare.placement.results.Verdict` per node, in the order asked:
  ``(True, score key, None)`` when the request fits (the policy's score as a key, higher is
  better), ``(False, why, main reason)`` when not. A node the ledger does not know fits a
  request that wants no devices (at the lowest score) and no other. The verdict equals what
  a fresh fit and a fresh ``Policy.score_many`` of that node alone would give.
* **What is kept**: every verdict, under the request's memo key (one per policy generation
  and request shape, :mod:`xpushare.placement.memo`): in the node's own memo, or, where
  the answer depends on the node's state alone, in the answers every node in that state
  shares (``NodeState.shared``). Per device-table state, one-container fits and the
  fitting device kinds (:mod:`xpushare.placement.fill`). The verdicts /filter read for the
  nodes that fit (:meth:`warm_verdicts`), for the /prioritize of the same pod. For the few
  memo keys asked about long lists of names (kube-scheduler's candidates), each name's
  verdict in one dict (:class:`Column`), so a list is read in one pass.
* **What invalidates it**: a node's change, through the ledger, which gives the node fresh
  ``memo`` and ``shared`` dicts (the new state's); a policy's new workload generation
  (``Policy.generation``), which makes new memo keys; the remembered /filter verdicts are
  read again for the nodes the ledger says changed since (``UsageLedger.changed_since``),
  and so are a column's names (a column older than the ledger's change log is dropped).
  Every table is bounded; an entry dropped is worked out again when asked.

The pipeline around it (:class:`~xpushare.placement.placer.Placer`) ranks, selects and
decides from these verdicts without knowing how they are made fast.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, cast

from xpushare.models import FitReason
from xpushare.placement.fill import Filler
from xpushare.placement.memo import UNMARKED, MemoKeys, core_mark_of
from xpushare.placement.results import LOWEST, UNKNOWN_NODE, Score, Verdict

if TYPE_CHECKING:
    from collections.abc import Iterable

    from xpushare.placement.vendorfit import VendorFits
    from xpushare.scheduling import PodRequest, Policy, UsageLedger
    from xpushare.scheduling.state import NodeState

#: /filter asks the cache's verdicts (scores included) when at most this many of its
#: candidates lack one, so the /prioritize that follows reads them instead of asking again
#: (:meth:`VerdictCache.warm_verdicts`). In a steady stream one to three of 500 candidates
#: changed since the pod shape was last asked (bench_throughput); a new shape or a new
#: workload generation leaves all of them to fill, which /filter's feasibility check answers
#: in a fraction of the scoring's time, so the scoring stays /prioritize's then.
WARM_FILL = 32

#: Lists of names at least this long are read through a :class:`Column` (kept from the
#: second read of a memo key on, so a stream of distinct shapes keeps none). Why: at 5,000
#: candidates, finding each name's node and then the verdict in that node's memo were the
#: two largest lines of /filter (a third of its time under py-spy in bench_throughput with
#: 5,000 candidates, 2026-12-06): each touches a different object per node, scattered
#: over the heap. Below this the per-node path costs less than keeping a column.
COLUMN_FROM = 256
#: Columns kept, the most recently read first: one per pod shape a stream keeps asking
#: about (a column at 5,000 nodes is a dict of some 300 kB).
MAX_COLUMNS = 8

_FITS = itemgetter(0)


@dataclass(slots=True)
class Column:
    """Each name's verdict under one memo key, as of the ledger's :attr:`clock`.

    Kept right as the memos are: a node's verdict changes only with the node (its names are
    worked out again when the ledger logs a change), or with the key (a new pod shape or
    workload generation, another column). Only nodes the ledger knows are kept, so a
    caller's made-up names cost it the per-node path, never the column's memory.
    """

    clock: int
    by_name: dict[str, Verdict]


class TooCold(Exception):
    """More candidates lack a verdict than the caller will wait for."""


@dataclass(slots=True)
class Remembered:
    """The verdicts /filter read, of the candidates that fit, for the /prioritize after."""

    key: int
    #: The ledger's clock when they were read: nodes changed since are asked again.
    clock: int
    names: list[str]
    verdicts: list[Verdict]


def unknown_verdict(request: PodRequest) -> Verdict:
    """The verdict of a node the ledger does not know."""
    if request.wants_devices:
        return (False, UNKNOWN_NODE, FitReason.NO_DEVICES)
    return (True, LOWEST, None)


class VerdictCache:
    """Each node's verdict for a request, worked out once and kept until the node changes."""

    def __init__(
        self, ledger: UsageLedger, policy: Policy, vendors: VendorFits, *, topology: bool
    ) -> None:
        self.ledger = ledger
        self.vendors = vendors
        self.keys = MemoKeys(policy, vendors.custom, topology=topology)
        #: The mark this cache leaves on nodes the core decides for all of its vendors
        #: with their own fits (shared by the caches of one plugin host's vendors).
        self.core_mark = core_mark_of(frozenset(vendors.custom))
        self.filler = Filler(ledger, policy, self.keys, vendors, self.core_mark)
        self.remembered: Remembered | None = None
        self.columns: OrderedDict[int, Column] = OrderedDict()

    def key(self, request: PodRequest) -> int:
        """The memo key *request*'s verdicts are kept under."""
        return self.keys.key(request)

    def verdict(self, node: NodeState, request: PodRequest) -> Verdict:
        """*node*'s verdict for *request*."""
        key = self.keys.key(request)
        hit = self._read_one(node, key)
        if hit is None:
            self.filler.fill(request, key, [node])
            hit = self._read_one(node, key)
        assert hit is not None  # fill() remembered it
        return hit

    def _read_one(self, node: NodeState, key: int) -> Verdict | None:
        """:meth:`read` of one known node, without the lists (the simulator asks every node
        this way when a pod fits none, to tally why)."""
        keys = self.keys
        if keys.share[key] or (node.core_mark is self.core_mark and keys.core_reads.get(key)):
            found: Verdict | None = node.shared.get(key)
        else:
            found = node.memo.get(key)
        return found

    def verdicts(
        self, request: PodRequest, nodes: Iterable[str] | None, *, limit: int | None = None
    ) -> tuple[list[str], list[Verdict]]:
        """The names of *nodes* (every node of the ledger when ``None``) and each one's
        verdict; with *limit*, :class:`TooCold` when more than that many lack one.

        Written as comprehensions: at 5,000 nodes each Python statement per node costs
        a millisecond. Nodes without a remembered verdict are answered together after.
        """
        keys = self.keys
        made = keys.made
        key = keys.key(request)
        table = self.ledger.nodes
        long = False
        if nodes is None:
            names = list(table)
            states: list[NodeState | None] = list(table.values())
        else:
            names = nodes if isinstance(nodes, list) else list(nodes)
            long = len(names) >= COLUMN_FROM and keys.made == made
            if long:
                column = self._column(request, key, limit)
                if column is not None:
                    verdicts = list(map(column.get, names))
                    if None not in verdicts:
                        return names, cast("list[Verdict]", verdicts)
            states = list(map(table.get, names))
        share = keys.share[key]
        if keys.made != made and states and None not in states:
            # A key made just now (a new pod shape or workload generation): no node has
            # a verdict under it (keys are never reused), so every node is filled without
            # a first pass over the memos (at 5,000 nodes half a millisecond of the
            # decision that meets the shape first, which sets the p99).
            if limit is not None and len(states) > limit:
                raise TooCold
            known = cast("list[NodeState]", states)
            self.filler.fill(request, key, known)
            # No column for a key met for the first time: a stream of distinct shapes
            # would build one a call and never read it (the second read of a key keeps it).
            return names, cast("list[Verdict]", self.read(states, key, share, request))
        verdicts = self.read(states, key, share, request)
        if None in verdicts:
            todo = [i for i, v in enumerate(verdicts) if v is None]
            if limit is not None and len(todo) > limit:
                raise TooCold
            # A node without a verdict is a known one (unknown nodes read theirs).
            missing = cast("list[NodeState]", states)
            if len(todo) == len(states):  # a new pod shape: every node
                self.filler.fill(request, key, missing)
            else:
                self.filler.fill(request, key, [missing[i] for i in todo])
            if len(todo) * 4 < len(verdicts):
                fresh = self.read([states[i] for i in todo], key, share, request)
                for i, verdict in zip(todo, fresh, strict=True):
                    verdicts[i] = verdict
            else:  # mostly new (a new pod shape): read them all again, at C speed
                verdicts = self.read(states, key, share, request)
        if long:
            if None in states:  # names the ledger does not know are not kept
                kept = [s is not None for s in states]
                self._keep(
                    key,
                    list(itertools.compress(names, kept)),
                    list(itertools.compress(cast("list[Verdict]", verdicts), kept)),
                )
            else:
                self._keep(key, names, cast("list[Verdict]", verdicts))
        return names, cast("list[Verdict]", verdicts)

    def _column(
        self, request: PodRequest, key: int, limit: int | None
    ) -> dict[str, Verdict] | None:
        """The column of *key*, brought up to the ledger's clock: the verdicts of the nodes
        changed since are worked out again (``None``: no column, or more changed than
        *limit* or the ledger's log allow; the caller reads node by node)."""
        column = self.columns.get(key)
        if column is None:
            return None
        ledger = self.ledger
        changed = ledger.changed_since(column.clock)
        if changed is None or (limit is not None and len(changed) > limit):
            del self.columns[key]
            return None
        self.columns.move_to_end(key)
        by_name = column.by_name
        if changed:
            table = ledger.nodes
            states = [s for s in map(table.get, changed) if s is not None]
            todo = [s for s in states if self._read_one(s, key) is None]
            if todo:
                self.filler.fill(request, key, todo)
            for name in changed:
                state = table.get(name)
                if state is None:  # removed: asked again (and found unknown) if named
                    by_name.pop(name, None)
                    continue
                found = self._read_one(state, key)
                assert found is not None  # filled just now
                by_name[name] = found
            column.clock = ledger.clock
        return by_name

    def _keep(self, key: int, names: list[str], verdicts: list[Verdict]) -> None:
        """Put *names*' verdicts, read at the ledger's present clock, in *key*'s column."""
        column = self.columns.get(key)
        clock = self.ledger.clock
        if column is None or column.clock != clock:
            # A column behind the clock would need its changed names taken out first:
            # _column did that when it was read, so only a new one can be behind.
            column = self.columns[key] = Column(clock, {})
            while len(self.columns) > MAX_COLUMNS:
                self.columns.popitem(last=False)
        self.columns.move_to_end(key)
        column.by_name.update(zip(names, verdicts, strict=True))

    def read(
        self, states: list[NodeState | None], key: int, share: bool, request: PodRequest
    ) -> list[Verdict | None]:
        """The remembered verdict of each node (``None``: none yet).

        For a request of vendors with fits of their own (``MemoKeys.core_reads``), a node
        those fits all leave to the core's (``NodeState.core_mark``, left by
        ``Filler.mark`` once its tables were asked) reads its state's shared answers,
        which ``Filler`` keeps for such nodes only; any other node, its own memo. Why: the
        vendor's nodes then need no answer of their own per pod shape (with per-node memos,
        each of 5,000 nodes missed once per shape and workload generation, and /filter fell
        back to its slower path for tens of calls after each), and the mark is one
        attribute where the tables' answers were three lookups a node.
        """
        # No test for unknown nodes first (a pass over 5,000 nodes costs 0.2 ms): they have
        # no memo, which the AttributeError below catches.
        known = cast("list[NodeState]", states)
        try:
            if share:
                return [s.shared.get(key) for s in known]
            if self.keys.core_reads.get(key):
                mark = self.core_mark
                return [(s.shared if s.core_mark is mark else s.memo).get(key) for s in known]
            return [s.memo.get(key) for s in known]
        except AttributeError:  # nodes the ledger does not know
            unknown = unknown_verdict(request)
            return [
                self.read([s], key, share, request)[0] if s is not None else unknown for s in states
            ]

    def top(self, request: PodRequest) -> list[NodeState]:
        """The ledger's nodes with the best verdict for *request*, in the ledger's order
        (empty: it fits none).

        The hot loop of the simulator and of /filter-sized decisions: no generator, no
        name lookups, the memo read inline; nodes without an answer are answered together
        after the loop and merged in ledger order.
        """
        key = self.keys.key(request)
        top: list[NodeState] = []
        missing: list[NodeState] = []
        best_score: Score = LOWEST
        share = self.keys.share[key]
        # Nodes marked as the core's read their state's answers, as in read() (their own
        # memo lacks them); no node carries UNMARKED, so other keys read the memo.
        mark = self.core_mark if self.keys.core_reads.get(key) else UNMARKED
        for state in self.ledger.nodes.values():
            v = (state.shared if share or state.core_mark is mark else state.memo).get(key)
            if v is None:
                missing.append(state)
                continue
            if not v[0]:
                continue
            score = v[1]
            if not top or score > best_score:
                top = [state]
                best_score = score
            elif score == best_score:
                top.append(state)
        if missing:
            merged = False
            self.filler.fill(request, key, missing)
            for state in missing:
                v = (state.shared if share or state.core_mark is mark else state.memo)[key]
                if not v[0]:
                    continue
                score = v[1]
                if not top or score > best_score:
                    top = [state]
                    best_score = score
                elif score == best_score:
                    top.append(state)
                    merged = True
            if merged:
                top.sort(key=lambda s: s.index)
        return top

    def warm_verdicts(self, request: PodRequest, names: list[str]) -> list[Verdict] | None:
        """Each of *names*' verdict, when at most :data:`WARM_FILL` of them lack one
        (``None`` otherwise: the caller answers feasibility its own way).

        The verdicts of the nodes that fit are remembered (with *names* itself when all
        fit: the caller must not change the list afterwards), and the /prioritize of the same
        pod, which kube-scheduler sends next with exactly those nodes, reads them back
        (:meth:`recall`) instead of reading 500 memos again. Not for vendors that score
        nodes themselves (``xpushare_score``).
        """
        made = self.keys.made
        key = self.keys.key(request)
        if self.vendors.scorers or self.keys.made != made:
            # A shape (or workload generation) not asked before: no verdict is known, so
            # the pass over the memos is skipped too (a stream of distinct shapes).
            self.remembered = None
            return None
        try:
            names, verdicts = self.verdicts(request, names, limit=WARM_FILL)
        except TooCold:
            self.remembered = None
            return None
        if all(map(_FITS, verdicts)):  # the common answer: no pass to pick the fitting
            # *names* itself, not a copy (a copy touches each name: a pass at 5,000 nodes);
            # /filter never changes the list kube-scheduler sent.
            self.remembered = Remembered(key, self.ledger.clock, names, verdicts)
            return verdicts
        fitting = list(map(_FITS, verdicts))
        self.remembered = Remembered(
            key,
            self.ledger.clock,
            list(itertools.compress(names, fitting)),
            list(itertools.compress(verdicts, fitting)),
        )
        return verdicts

    def recall(self, request: PodRequest, names: list[str]) -> list[Verdict] | None:
        """The verdicts :meth:`warm_verdicts` remembered, when *names* are the nodes they
        were for and the request's key is theirs; the nodes changed since are read again.
        ``None``: nothing to recall (ask :meth:`verdicts`)."""
        known = self.remembered
        if known is None or known.key != self.keys.key(request) or names != known.names:
            return None
        changed = self.ledger.changed_since(known.clock)
        if changed is None:
            return None
        at = [i for i, name in enumerate(names) if name in changed] if changed else []
        if not at:
            return known.verdicts
        verdicts = list(known.verdicts)
        _, fresh = self.verdicts(request, [names[i] for i in at])
        for i, verdict in zip(at, fresh, strict=True):
            verdicts[i] = verdict
        return verdicts


__all__ = [
    "COLUMN_FROM",
    "MAX_COLUMNS",
    "WARM_FILL",
    "Column",
    "Remembered",
    "TooCold",
    "VerdictCache",
    "unknown_verdict",
]

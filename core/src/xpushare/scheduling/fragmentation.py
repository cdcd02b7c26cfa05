"""GPU fragmentation for a workload, and the policy that places tasks to keep it low (FGD).

From "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient
Descent" (Weng et al., USENIX ATC'23). A node's fragmentation for a workload is, summed over
the workload's task shapes weighted by their frequency, the free device capacity on the node
that a task of that shape could not use:

* all of it when the task cannot run on the node at all (too few devices it could use, the
  wrong model, not enough CPU or host memory left);
* otherwise the free capacity of each device that cannot hold one part of the task: for a
  fractional task, devices with less free than it needs; for a k-device task of whole
  devices, devices that are not entirely free.

A device cut into partitions when containers get them (dynamic MIG: its profiles carry
placements, :mod:`~xpushare.scheduling.partitions`) has no continuous share to give: its
capacity comes as instances of its profiles at fixed placements, and free slices that no
profile can reach any more are capacity no task can use. The measure reads such a device by
what its profiles still fit, with the paper's rule:

* its free capacity is its compute slices that no instance takes (one A100 slice of seven
  is 142 units), not the memory and compute shares its instances book (seven 1g instances
  book 91 % of an A100's compute and leave no slice);
* a task shape can use it when the fit could give a task of that shape an instance now:
  the smallest profile that holds the shape's memory and compute and has a free placement
  overlapping no instance in use (for a whole-device shape, the profile that spans the
  device), as :meth:`~xpushare.scheduling.partitions.Geometry.pick` chooses it for the fit;
* otherwise all its free capacity is the shape's fragment. After a 1g instance at slice 0
  of an A100, the six free slices are lost to a 4g shape (no 4g placement is left); after
  one at slice 6 they are not.

A finer rule was measured and left: counting, even where the shape fits, the free slices
that successive instances of it cannot reach (an empty A100 loses 3 of 7 slices to a 4g
shape). On the docs/simulator.md MIG fleet (seeds 42-51) it placed 0.49 point fewer of the
GPU demand than the paper's rule under ``fgd-cpu`` and 0.39 fewer under ``fgd``,
presumably because its growths move with almost every placement (each instance changes
what larger shapes could still fill), not only with those that block a profile outright.
Every other device is measured as above.

Capacity is counted in thousandths of a device (:data:`~xpushare.scheduling.state.UNITS`).
A task that uses no device (CPU only) can use none of it, so for it all free capacity
counts; the term is the same for every node, which leaves decisions unchanged, as in the
paper. The FGD policy places each task where fragmentation grows least, ranking nodes as the
authors' simulator does: by an integer score of the growth (:func:`fgd_score`), so nodes
whose growths differ by little tie, and ties go to the first node in the fleet's order.

The measure itself is fragmeter.py's :class:`~xpushare.scheduling.fragmeter.FragmentationMeter`;
this module holds the policy that ranks nodes by it.
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from xpushare.scheduling.fit import (
    Pick,
    PodFit,
    check_device,
    fit_demand,
    fit_pod,
)
from xpushare.scheduling.fragmeter import FragmentationMeter as FragmentationMeter
from xpushare.scheduling.fragmeter import State, sig_after
from xpushare.scheduling.fragmeter import table_state as table_state
from xpushare.scheduling.policy import Policy
from xpushare.scheduling.state import (
    MAX_MEMO_ENTRIES,
    NodeState,
    cached_signature,
)
from xpushare.scheduling.workload import DEFAULT_COVERAGE as DEFAULT_COVERAGE
from xpushare.scheduling.workload import MODEL_TOLERANCE, RETRY_AFTER, LearntWorkload
from xpushare.scheduling.workload import TaskShape as TaskShape
from xpushare.scheduling.workload import Workload as Workload

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xpushare.scheduling.fragbatch import Growth
    from xpushare.scheduling.request import PodRequest

log = logging.getLogger(__name__)

_memo_ids = itertools.count(-1, -1)  # negative: never equal to the placement engine's keys
#: Bound of the growths kept per (node state, request shape), shared by nodes in one state:
#: some 500 bytes each (the table states after the placement), 4 MB at the bound. The full
#: openb replay keeps ~22,000 over its run; at 8,192 it runs as fast (measured).
_MAX_STATE_ANSWERS = 8_192
#: Request kinds the policy keeps an id for (its memo keys). Ids are never reused, so past
#: the bound the table is emptied and answers under the old ids age out of the node memos.
MAX_REQUEST_IDS = 4_096
#: kube-scheduler's highest node score (framework.MaxNodeScore), the scale of the FGD
#: simulator's score.
MAX_NODE_SCORE = 100
#: Fragmentation growth (in units) per step of the sigmoid's argument: the FGD simulator
#: divides the change of fragmentation, in milli-GPU, by 1,000.
SCORE_SCALE = 1_000
#: Past this argument exp() overflows a float; the score is 0 long before (at ~4.6).
_EXP_LIMIT = 700.0


class Best(NamedTuple):
    """The best placement of a pod on one node under a fragmentation measure."""

    #: Growth of the node's fragmentation, in units; ``inf`` when the pod does not fit.
    growth: float
    #: The devices chosen (one-demand pods), else ``None``.
    picks: list[Pick] | None
    #: The states of the changed device tables after the placement, by vendor.
    after: dict[str, State]


_INF = float("inf")
_NO_FIT = Best(_INF, None, {})

#: Nodes below which the policies measure one by one rather than together on arrays
#: (:mod:`~xpushare.scheduling.fragbatch`): numpy's fixed cost per operation (~1-5 µs, some
#: 30 operations) exceeds the scalar search's ~40 µs per node state. The array modules are
#: imported on the first batch, so processes that never place pods (the node agent, the
#: CLI's other commands) do not load numpy.
BATCH_MIN = 4


def fgd_score(growth: float) -> int:
    """The FGD simulator's node score for a placement that grows fragmentation by *growth*
    units: ``int(100 x sigmoid(-growth / 1000))``, truncated as Go's int64() conversion.

    50 for no change, above 50 when fragmentation shrinks. The truncation is what matters:
    growths within a few hundred units of each other score alike, so many nodes tie, and
    the tie order then packs tasks onto the first of them (docs/simulator.md: with the
    exact growth and the same order our FGD places ~1 point less on the openb traces).
    """
    if growth == _INF:
        return 0
    x = growth / SCORE_SCALE
    if x > _EXP_LIMIT:
        return 0
    return int(MAX_NODE_SCORE / (1.0 + math.exp(x)))


class FragmentationPolicy(Policy):
    """FGD: place each task where the fleet's fragmentation grows least.

    Nodes are ranked by :func:`fgd_score` of the growth (the authors' integer score), not by
    the growth itself; among equal scores the engine takes the first node in the fleet's
    order (the simulator's is seeded, see docs/simulator.md). The devices inside the chosen
    node are still those of least exact growth.

    ``workload`` gives the task shapes and their frequencies. Without one, the policy learns
    it from the pods it is asked about (``observe``) in bounded memory
    (:class:`~xpushare.scheduling.workload.LearntWorkload`: quantised shapes, decayed counts,
    periodic refreshes), so an extender needs no configuration. A refresh that fails is
    logged, counted (``model_errors``, and ``on_model_error``) and tried again later; the
    workload in use stays, and no request ever sees the failure.
    """

    name = "fgd"
    state_pure = True
    fits_in_score = True
    description = "least growth of fragmentation (FGD, ATC'23)"

    def __init__(
        self, workload: Workload | None = None, coverage: float = DEFAULT_COVERAGE
    ) -> None:
        self.coverage = coverage
        self._learn = workload is None
        self.learnt = LearntWorkload(coverage)
        self._frag_key = next(_memo_ids)
        self._set(workload or Workload([], []))

    # -- workload ----------------------------------------------------------------------------

    def _set(self, workload: Workload) -> None:
        self.generation += 1
        self.workload = workload
        self.meter = FragmentationMeter(workload)
        # Node memo keys: fresh ints per workload, so answers from an older one are unused
        # (ints, because hashing a request's nested key on every lookup is slow).
        self._keys: dict[tuple[Any, ...], int] = {}
        self._last_request: PodRequest | None = None
        self._last_id = 0
        self._by_state: dict[tuple[int, int], Best] = {}

    def set_workload(self, workload: Workload) -> None:
        self._learn = False
        self._set(workload)

    @property
    def learns(self) -> bool:
        """Whether the workload is learnt from the pods observed (not given)."""
        return self._learn

    def observe(self, request: PodRequest) -> None:
        if not self._learn:
            return
        try:
            if self.learnt.observe(request):
                self._refresh()
        except Exception as exc:  # a model that cannot learn must never fail a request
            self._model_failed(exc)

    def _refresh(self) -> None:
        fresh = self.learnt.workload()
        current = self.workload
        # The same shapes (in any order: near-equal counts swap places) with weights that
        # barely moved are not worth the answers a new workload invalidates.
        if set(fresh.shapes) != set(current.shapes) or fresh.distance(current) > MODEL_TOLERANCE:
            self._set(fresh)

    def _model_failed(self, exc: Exception) -> None:
        self.model_errors += 1
        self.learnt.retry_later()
        log.warning(
            "policy %s: refreshing the learnt workload failed (%d so far); keeping the "
            "current one and retrying after %d pods: %s: %s",
            self.name,
            self.model_errors,
            RETRY_AFTER,
            type(exc).__name__,
            exc,
            exc_info=self.model_errors == 1,
        )
        hook = self.on_model_error
        if hook is not None:
            try:
                hook(self.name, exc)
            except Exception:  # the counter is the caller's; its failure is only logged
                log.exception("policy %s: on_model_error failed", self.name)

    # -- measure -----------------------------------------------------------------------------

    def node_frag(self, node: NodeState) -> float:
        # One memo entry per node whatever the number of workloads it has seen: the value
        # is kept with the generation it was measured for.
        found = node.memo.get(self._frag_key)
        if found is not None and found[0] == self.generation:
            return float(found[1])
        frag = self.meter.node_frag(node)
        node.remember(self._frag_key, (self.generation, frag))
        return frag

    def _request_id(self, request: PodRequest) -> int:
        if request is self._last_request:  # hashing a request's nested key costs ~1 µs
            return self._last_id
        key = self._keys.get(request.key)
        if key is None:
            if len(self._keys) >= MAX_REQUEST_IDS:
                self._keys.clear()
            key = self._keys[request.key] = next(_memo_ids)
        self._last_request, self._last_id = request, key
        return key

    def best(self, node: NodeState, request: PodRequest, *, picks: bool = False) -> Best:
        """The best placement of *request* on *node*: growth, picks, signatures after.

        ``picks`` are those of a single-demand pod (the common case, chosen device by
        device); they are ``None`` for other pods, and when the answer came from another node
        in the same state or from the batch search, unless *picks* is asked.
        """
        key = self._request_id(request)
        hit: Best | None = node.memo.get(key)
        if hit is not None and (not picks or hit.picks is not None or len(request.demands) != 1):
            return hit
        skey = None if picks else self._state_key(node, request, key)
        if skey is not None:
            shared = self._by_state.get(skey)
            if shared is not None:
                if node.memo_limit > MAX_MEMO_ENTRIES:
                    node.remember(key, shared)  # a replay's node (see _keep)
                return shared
        result = self._best(node, request)
        self._keep(node, key, skey, result)
        return result

    def best_many(self, nodes: Sequence[NodeState], request: PodRequest) -> list[Best | Growth]:
        """The growth (and CPU-aware growth, where measured) of the best placement on each
        node: :meth:`best`, or for the nodes measured together on arrays
        (:mod:`~xpushare.scheduling.fragbatch`) where the pod allows it, a :class:`Growth`.

        Answers from the arrays are not remembered here: the engine remembers its verdicts
        per node state, and placing a pod measures its node again for the devices.
        """
        key = self._request_id(request)
        out: list[Best | Growth | None] = [node.memo.get(key) for node in nodes]
        todo = [i for i, hit in enumerate(out) if hit is None]
        if len(todo) >= BATCH_MIN and self.workload.shapes:
            from xpushare.scheduling import fragbatch  # numpy: see BATCH_MIN

            demand = fragbatch.batch_demand(request)
            if demand is not None:
                found = fragbatch.search(
                    self.meter, self._tie_meter(), [nodes[i] for i in todo], request, demand, key
                )
                for i, g in zip(todo, found, strict=True):
                    out[i] = g
        for i in todo:
            if out[i] is None:
                out[i] = self.best(nodes[i], request)
        return cast("list[Best | Growth]", out)  # every None was answered just above

    def _tie_meter(self) -> FragmentationMeter | None:
        """The measure whose growth the batch search should also report (none for FGD)."""
        return None

    def _keep(self, node: NodeState, key: int, skey: tuple[int, int] | None, result: Best) -> None:
        if skey is not None:
            if len(self._by_state) >= _MAX_STATE_ANSWERS:
                self._by_state.clear()
            # Without picks: they name this node's devices. A placement asks again, with
            # picks.
            result = self._by_state[skey] = result._replace(picks=None) if result.picks else result
            if node.memo_limit <= MAX_MEMO_ENTRIES:
                # The scheduler's nodes: not in the node's memo too. With a stream of new
                # request shapes each answer would stay there after the bound above
                # dropped it, up to the memo's bound per node (32: at 5,000 nodes 160,000
                # answers of ~650 bytes; RSS grew ~6 MiB per 10,000 requests in
                # bench_shapes). A replay's ledger keeps more per node (the simulator asks
                # every node about each of its trace's shapes in turn): there the node's
                # copy is a dict lookup instead of the state key, 10 % of fgd-cpu's replay.
                return
        node.remember(key, result)

    def _state_key(self, node: NodeState, request: PodRequest, key: int) -> tuple[int, int] | None:
        """A key under which nodes in the same state share the answer, or ``None``.

        The answer depends on the node's device tables, free CPU and free memory only,
        except for requests that name device UUIDs (absent from the state).
        """
        if any(d.include_uuids or d.exclude_uuids for d in request.demands):
            return None
        return (node.state_id(), key)

    def _best(self, node: NodeState, request: PodRequest) -> Best:
        before = self.node_frag(node)
        cpu, mem = request.cpu_milli, request.memory_mib
        meter = self.meter
        demands = request.demands
        if len(demands) == 1 and not demands[0].init:
            demand = demands[0]
            vendor = demand.vendor
            table = node.tables.get(vendor)
            if table is None:
                return _NO_FIT
            candidates: dict[tuple[Any, ...], Pick] = {}
            for d in table.devices:
                result = check_device(d, demand, None)
                if type(result) is tuple:
                    candidates.setdefault(cached_signature(d), result)
            # Signature order, not device order: nodes in the same state then choose alike,
            # and the batch search (fragbatch) tries them in the same order.
            growth: dict[tuple[Any, ...], tuple[float, State]] = {}
            for sig in sorted(candidates):
                after = sig_after(table, [candidates[sig]])
                growth[sig] = (
                    meter.frag_after_sigs(node, {vendor: after}, cpu, mem) - before,
                    after,
                )
            if demand.count == 1:
                best = _NO_FIT
                for sig, (delta, after) in growth.items():
                    if delta < best.growth:
                        best = Best(delta, [candidates[sig]], {vendor: after})
                return best
            rank = {sig: i for i, sig in enumerate(sorted(growth, key=lambda g: growth[g][0]))}
            last = len(rank)
            order = sorted(table.devices, key=lambda d: rank.get(cached_signature(d), last))
            picks, _ = fit_demand(table, demand, order)
            if picks is None:
                return _NO_FIT
            after_all = {vendor: sig_after(table, picks)}
            return Best(meter.frag_after_sigs(node, after_all, cpu, mem) - before, picks, after_all)
        fit = fit_pod(node, request)
        if not fit.fits:
            return _NO_FIT
        by_vendor: dict[str, list[Pick]] = {}
        for demand, picks in fit.picks:
            by_vendor.setdefault(demand.vendor, []).extend(picks)
        states = {v: sig_after(node.tables[v], p) for v, p in by_vendor.items()}
        return Best(meter.frag_after_sigs(node, states, cpu, mem) - before, None, states)

    # -- policy ------------------------------------------------------------------------------

    def score(self, node: NodeState, request: PodRequest) -> float | tuple[float, ...]:
        return fgd_score(self.best(node, request).growth)

    def score_many(
        self, nodes: Sequence[NodeState], request: PodRequest
    ) -> list[float | tuple[float, ...] | None]:
        return [
            None if b.growth == _INF else fgd_score(b.growth)
            for b in self.best_many(nodes, request)
        ]

    def place(self, node: NodeState, request: PodRequest) -> PodFit | None:
        picks = self.best(node, request, picks=True).picks
        if picks is None:
            return None
        return PodFit(True, picks=[(request.demands[0], picks)])

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

Speed: the part of the measure that depends on devices is memoised per (vendor, table
signature): nodes in the same state share it, and a fleet has few distinct states. Only the
host check (CPU and memory left against each shape's) is done per node.
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import TYPE_CHECKING, Any, NamedTuple

from xpushare.scheduling.fit import (
    Pick,
    PodFit,
    check_device,
    fit_demand,
    fit_pod,
    sig_can_host,
)
from xpushare.scheduling.policy import Policy
from xpushare.scheduling.state import (
    MAX_MEMO_ENTRIES,
    SIG_UNITS,
    DeviceState,
    DeviceTable,
    NodeState,
    cached_signature,
    device_signature,
    intern_signature,
)
from xpushare.scheduling.workload import DEFAULT_COVERAGE as DEFAULT_COVERAGE
from xpushare.scheduling.workload import MODEL_TOLERANCE, RETRY_AFTER, LearntWorkload
from xpushare.scheduling.workload import TaskShape as TaskShape
from xpushare.scheduling.workload import Workload as Workload

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from xpushare.scheduling.fragarrays import VendorArrays
    from xpushare.scheduling.fragbatch import Growth
    from xpushare.scheduling.request import PodRequest

log = logging.getLogger(__name__)

_memo_ids = itertools.count(-1, -1)  # negative: never equal to the placement engine's keys
#: Bound of the growths kept per (node state, request shape), shared by nodes in one state:
#: some 500 bytes each (the table states after the placement), 4 MB at the bound. The full
#: openb replay keeps ~22,000 over its run; at 8,192 it runs as fast (measured).
_MAX_STATE_ANSWERS = 8_192
#: Table states whose vector a meter keeps. A vector holds up to one (CPU, memory, growth)
#: per task shape: ~6 KB at the learnt workload's 64 shapes, so 12 MB at the bound. Each
#: placement the policy weighs is a new state, so a stream of new request sizes fills it;
#: the openb replay meets ~3,000 and runs as fast with this bound (a refill is ~30 us).
_MAX_VECTORS = 2_048
#: Request kinds the policy keeps an id for (its memo keys). Ids are never reused, so past
#: the bound the table is emptied and answers under the old ids age out of the node memos.
MAX_REQUEST_IDS = 4_096
#: Device states whose shape masks a meter keeps, some 250 bytes each: 2 MB at the bound.
#: A fleet has hundreds (the openb replay ~420), and each request of a new size adds the
#: states its booking would leave (as fragarrays.MAX_SIGNATURES).
_MAX_MASKS = 8_192

#: kube-scheduler's highest node score (framework.MaxNodeScore), the scale of the FGD
#: simulator's score.
MAX_NODE_SCORE = 100
#: Fragmentation growth (in units) per step of the sigmoid's argument: the FGD simulator
#: divides the change of fragmentation, in milli-GPU, by 1,000.
SCORE_SCALE = 1_000
#: Past this argument exp() overflows a float; the score is 0 long before (at ~4.6).
_EXP_LIMIT = 700.0

#: A device table's state (see :meth:`DeviceTable.state_signature`).
Signature = tuple[tuple[Any, ...], ...]
#: A state with its interned id (:func:`~xpushare.scheduling.state.intern_signature`).
State = tuple[int, Signature]


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


class _Vector:
    """The device-dependent part of a table's fragmentation for every shape."""

    __slots__ = ("fixes", "ok_sum", "total")

    def __init__(self, ok_sum: float, total: int, fixes: Sequence[tuple[int, int, float]]) -> None:
        #: Fragmentation when the node has CPU and memory for every shape.
        self.ok_sum = ok_sum
        #: Free units of the table.
        self.total = total
        #: (cpu, memory, extra): add *extra* when the node lacks that CPU or memory.
        self.fixes = fixes


class FragmentationMeter:
    """Measures fragmentation for one workload, memoised per device-table state.

    Table states are passed as :data:`State`: (interned id, signature); caches are keyed
    by the id, since hashing a signature costs more than the lookup it serves.
    """

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self._vectors: dict[tuple[str, int], _Vector] = {}
        #: One object per distinct fix: states share most of them (a shape's CPU and memory
        #: are the workload's, its stuck capacity takes few values), so a vector holds
        #: pointers, not tuples of its own (2,048 vectors were ~12 MB as tuples each).
        self._fix_pool: dict[tuple[int, int, float], tuple[int, int, float]] = {}
        self._masks: dict[tuple[str, tuple[Any, ...]], int] = {}
        self._arrays: dict[str, VendorArrays] = {}

    def arrays(self, vendor: str) -> VendorArrays:
        """The measure's rows for *vendor* on arrays, for the batch search."""
        found = self._arrays.get(vendor)
        if found is None:
            from xpushare.scheduling.fragarrays import VendorArrays  # numpy: see BATCH_MIN

            found = self._arrays[vendor] = VendorArrays(self.workload, vendor, self.host_mask)
        return found

    def host_mask(self, vendor: str, device: tuple[Any, ...]) -> int:
        """Bit i set when a device in state *device* could hold one part of shape i."""
        key = (vendor, device)
        mask = self._masks.get(key)
        if mask is None:
            mask = 0
            for i, shape in enumerate(self.workload.shapes):
                demand = shape.demand
                if demand is not None and shape.vendor == vendor and sig_can_host(device, demand):
                    mask |= 1 << i
            if len(self._masks) >= _MAX_MASKS:
                self._masks.clear()
            self._masks[key] = mask
        return mask

    def groups(self, vendor: str, sig: Signature) -> list[tuple[int, int, int]]:
        """(shape mask, devices, free units of each) per distinct device state of *sig*."""
        out: list[tuple[int, int, int]] = []
        for device, same in itertools.groupby(sig):
            out.append((self.host_mask(vendor, device), len(list(same)), device[SIG_UNITS]))
        return out

    def vector(self, vendor: str, state: State) -> _Vector:
        key = (vendor, state[0])
        vec = self._vectors.get(key)
        if vec is not None:
            return vec
        groups = self.groups(vendor, state[1])
        total = sum(n * units for _, n, units in groups)
        ok_sum = 0.0
        fixes: list[tuple[int, int, float]] = []
        for i, (shape, w) in enumerate(zip(self.workload.shapes, self.workload.raw, strict=True)):
            demand = shape.demand
            if demand is None or shape.vendor != vendor:
                ok_sum += w * total
                continue
            usable = 0
            stuck = 0
            bit = 1 << i
            for mask, n, units in groups:
                if mask & bit:
                    usable += n
                else:
                    stuck += n * units
            if usable < demand.count:
                ok_sum += w * total
                continue
            ok_sum += w * stuck
            if (shape.cpu_milli or shape.memory_mib) and total > stuck:
                fix = (shape.cpu_milli, shape.memory_mib, w * (total - stuck))
                fixes.append(self._fix_pool.setdefault(fix, fix))
        vec = _Vector(ok_sum, total, tuple(fixes))
        if len(self._vectors) >= _MAX_VECTORS:
            self._vectors.clear()
            self._fix_pool.clear()  # vectors kept elsewhere stay valid
        self._vectors[key] = vec
        return vec

    def table_raw(
        self, vendor: str, state: State, cpu_free: int | None, memory_free: int | None
    ) -> float:
        """A table's fragmentation times the workload's scale (an integer for counted
        weights, so sums of these are exact in any order)."""
        vec = self.vector(vendor, state)
        frag = vec.ok_sum
        if vec.fixes and (
            (cpu_free is not None and cpu_free < self.workload.max_cpu)
            or (memory_free is not None and memory_free < self.workload.max_memory)
        ):
            for cpu, memory, extra in vec.fixes:
                if (cpu_free is not None and cpu > cpu_free) or (
                    memory_free is not None and memory > memory_free
                ):
                    frag += extra
        return frag

    def node_frag(self, node: NodeState) -> float:
        """Fragmentation of *node* now, in units (thousandths of a device)."""
        cpu, mem = node.cpu_free, node.memory_free
        raw = sum(
            self.table_raw(vendor, table_state(table), cpu, mem)
            for vendor, table in node.tables.items()
        )
        return raw / self.workload.scale

    def frag_after_sigs(
        self,
        node: NodeState,
        after: Mapping[str, State],
        cpu_milli: int,
        memory_mib: int,
    ) -> float:
        """Fragmentation of *node* with its tables in the states *after* (by vendor; the
        others as they are) and *cpu_milli*, *memory_mib* more taken."""
        cpu = None if node.cpu_free is None else node.cpu_free - cpu_milli
        mem = None if node.memory_free is None else node.memory_free - memory_mib
        raw = sum(
            self.table_raw(vendor, after.get(vendor) or table_state(table), cpu, mem)
            for vendor, table in node.tables.items()
        )
        return raw / self.workload.scale

    def frag_after(
        self,
        node: NodeState,
        picks: Sequence[tuple[DeviceTable, Sequence[Pick]]],
        cpu_milli: int,
        memory_mib: int,
    ) -> float:
        """Fragmentation of *node* if *picks* were booked and the host resources taken."""
        after = {t.vendor: sig_after(t, p) for t, p in picks}
        return self.frag_after_sigs(node, after, cpu_milli, memory_mib)


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


def table_state(table: DeviceTable) -> State:
    return (table.state_id(), table.state_signature())


def sig_after(table: DeviceTable, picks: Sequence[Pick]) -> State:
    """The state *table* would be in with *picks* booked (the table is left as it was)."""
    touched: dict[int, DeviceState] = {}
    for d, memory, compute, exclusive, partition in picks:
        d.used_slots += 1
        d.used_memory += memory
        d.used_compute += compute
        d.exclusive += 1 if exclusive else 0
        if partition is not None and d.geometry is not None:
            d.partitions_used[partition] += 1
        touched[id(d)] = d
    try:
        new = {key: device_signature(d) for key, d in touched.items()}
    finally:
        for d, memory, compute, exclusive, partition in picks:
            d.used_slots -= 1
            d.used_memory -= memory
            d.used_compute -= compute
            d.exclusive -= 1 if exclusive else 0
            if partition is not None and d.geometry is not None:
                d.partitions_used[partition] -= 1
                if d.partitions_used[partition] <= 0:
                    del d.partitions_used[partition]
    sig = tuple(sorted(new.get(id(d)) or cached_signature(d) for d in table.devices))
    return (intern_signature(sig), sig)


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
        return out  # type: ignore[return-value]

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

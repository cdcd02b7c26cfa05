"""The placement engine the extender and the simulator share: filter, score, decide.

Why one engine: a policy measured in the simulator must be the policy the cluster runs, so
``xpushare simulate`` replays a trace through exactly the calls the extender makes for each
pod (parse with the vendors' hooks, filter the candidate nodes, score them, decide the
devices on the chosen node, count it in the ledger).

Speed (a decision p99 <= 5 ms at 500 nodes, <= 20 ms at 5,000; 10 million node checks
per trace replay):

* a node's answer for a request (fits and score, or why not) depends only on the node's
  state and the request (for the core's fit and a state-pure policy), so it is kept in the
  answers every node in that state shares (``NodeState.shared``, swapped by the ledger when
  the node changes): worked out once per state, and a node is re-examined only after it
  changed; other answers are kept in the node's own memo;
* the nodes without an answer are answered together: fit per state (from the kinds of
  devices, or the table summaries, so a full node is rejected in O(1)), then one
  ``Policy.score_many`` call, which the fragmentation policies run on arrays;
* the per-node passes are comprehensions over the node list (at 5,000 nodes each Python
  statement per node costs a millisecond), and answers are mapped per distinct verdict;
* pydantic models are built only for the decision and for explanations.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import operator
import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from xpushare.errors import PluginError
from xpushare.models import (
    ContainerAssignment,
    ContainerRequest,
    DeviceUsage,
    FitReason,
    FitResult,
    NodeFit,
    PodAssignment,
)
from xpushare.placement.config import PlacementConfig
from xpushare.placement.requests import pod_request
from xpushare.scheduling import (
    Demand,
    PodFit,
    PodRequest,
    Policy,
    PolicyRegistry,
    UsageLedger,
    builtin_policies,
    fit_demand,
    fit_pod,
    host_reject,
    quick_reject,
    summarize,
)
from xpushare.scheduling.fit import (
    HOST_REJECTS,
    DeviceOrder,
    Extra,
    Pick,
    add_extra,
    fit_alone,
    sig_can_host,
    slices,
)
from xpushare.scheduling.podpolicy import BINPACK, SPREAD, TOPOLOGY, HamiDeviceOrder
from xpushare.scheduling.policies import emptiest_first, fullest_first
from xpushare.scheduling.state import remember

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from xpushare.models import PodView
    from xpushare.plugins import PluginHost, VendorHandle
    from xpushare.scheduling.podpolicy import PodPolicy
    from xpushare.scheduling.state import DeviceState, DeviceTable, NodeState

log = logging.getLogger(__name__)

#: Memo keys: one small int per (placer or policy, request shape), unique in the process,
#: because hashing a request's nested key tuple on every node lookup costs more than the
#: rest of a cached lookup.
_memo_ids = itertools.count(1)

#: Bound of the answers kept per (device-table state, request shape); past it they are
#: dropped and recomputed. A fit answer holds its picks and the request's demand, 1-2 KB
#: (some 12 MB at the bound); a fleet has a few hundred table states per request shape, and
#: the openb replay, which keeps ~23,000 over its run, runs as fast with 8,192 (measured).
_MAX_STATE_ANSWERS = 8_192

#: Requests whose per-device-state fit answers are kept (a few entries each).
_MAX_REQUEST_KINDS = 10_000

#: Request kinds (per policy generation) the placer keeps a memo key for, a few hundred
#: bytes each. Keys are never reused: past the bound the table is emptied, and the answers
#: kept under the old keys age out of the node memos (``NodeState.memo_limit``).
MAX_MEMO_KEYS = 4_096

#: Distinct per-pod policy choices (HAMi's policy annotations) a placer keeps a placer for.
#: A choice is a few names and three weights, and a cluster uses a handful; weights make
#: the space unbounded, so past the bound the placers are dropped and built again on need
#: (their answers age out of the node memos like any other).
MAX_POD_POLICIES = 64

#: /filter asks the placer's verdicts (scores included) when at most this many of its
#: candidates lack one, so the /prioritize that follows reads them instead of asking again
#: (:meth:`Placer.warm_verdicts`). In a steady stream one to three of 500 candidates changed
#: since the pod shape was last asked (bench_throughput); a new shape or a new workload
#: generation leaves all of them to fill, which /filter's feasibility check answers in a
#: fraction of the scoring's time, so the scoring stays /prioritize's then.
WARM_FILL = 32

#: A node's score key: compared element by element, higher is better.
Score = tuple[float, ...]
#: A node's answer for a request: (True, score key, None) or (False, why, main reason).
Verdict = tuple[bool, Any, Any]
_T = TypeVar("_T")
_LOWEST: Score = (float("-inf"),)


_NINES = (9,) * 16  # digits kept, for map(round, ...) over a key's elements


def score_key(value: float | Sequence[float]) -> Score:
    """A policy's score as a key; floats are rounded so equal sums compare equal.

    Asked once per node state a pod shape meets (a cold fill: hundreds). ``round(x, 9)``
    costs ~0.35 µs (a decimal conversion), so an int, which it would give back unchanged
    as a float (FGD's integer score), is only converted.
    """
    if isinstance(value, int | float):
        return (float(value) if type(value) is int else round(float(value), 9),)
    if type(value) is tuple and len(value) == 3:  # fgd-cpu's key, once per node state
        a, b, c = value
        return (
            float(a) if type(a) is int else round(float(a), 9),
            round(float(b), 9),
            round(float(c), 9),
        )
    return tuple(map(round, map(float, value), _NINES))


#: Node message when the ledger has never heard of a node.
UNKNOWN_NODE = "node unknown to xpushare (no inventory registered by its node agent)"


class _TooCold(Exception):
    """More candidates lack a verdict than the caller will wait for (``Placer._verdicts``)."""


class NoFit(ValueError):
    """The pod does not fit the node it was meant for; the message says why."""


@dataclass(slots=True)
class FilterResult:
    """Which candidate nodes fit a pod, and why each other one does not."""

    fits: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def tally(self) -> Counter[str]:
        """How many nodes failed for each reason."""
        return Counter(self.failed.values())

    def explain(self, limit: int = 5) -> str:
        """'0/3 nodes fit: 2 x <reason>; 1 x <reason>', for an event or a log line."""
        total = len(self.fits) + len(self.failed)
        parts = [f"{n} x {why}" for why, n in self.tally().most_common(limit)]
        head = f"{len(self.fits)}/{total} nodes fit"
        return f"{head}: {'; '.join(parts)}" if parts else head


@dataclass(slots=True)
class _Remembered:
    """The verdicts /filter read, of the candidates that fit, for the /prioritize after."""

    key: int
    #: The ledger's clock when they were read: nodes changed since are asked again.
    clock: int
    names: list[str]
    verdicts: list[Verdict]


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a pod goes: the node, its score, and the devices per container."""

    node: str
    score: float
    assignment: PodAssignment


#: One marker per set of vendor names (``NodeState.core_mark``); a process has one or two.
_CORE_MARKS: dict[frozenset[str], object] = {}
#: A mark no node carries (a node's ``core_mark`` starts as ``None``).
_UNMARKED = object()


def _core_mark_of(vendors: frozenset[str]) -> object:
    found = _CORE_MARKS.get(vendors)
    if found is None:
        if len(_CORE_MARKS) >= MAX_POD_POLICIES:  # a bound for tests that build many hosts
            _CORE_MARKS.clear()
        found = _CORE_MARKS[vendors] = object()
    return found


def policy_registry(host: PluginHost | None = None) -> PolicyRegistry:
    """Every policy: the core's, and those plugins contribute through the hook."""
    registry = PolicyRegistry()
    if host is None:
        registry.update(builtin_policies(), owner="xpushare")
    else:
        host.call_register_policies(registry.register)
    return registry


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


class Placer:
    """Filter, score and decide placements against a :class:`UsageLedger`.

    ``policy`` is a :class:`Policy` or the name of a registered one (options from
    ``config.policy_options``). ``host`` provides the vendors: their request parsing and,
    for vendors that implement ``xpushare_fit``, their own fit; without a host only the
    core's default fit is used and pods must come as :class:`PodRequest`.
    """

    def __init__(
        self,
        ledger: UsageLedger,
        policy: Policy | str | None = None,
        *,
        host: PluginHost | None = None,
        config: PlacementConfig | None = None,
        registry: PolicyRegistry | None = None,
        device_order: DeviceOrder | None = None,
    ) -> None:
        self.ledger = ledger
        self.host = host
        self.config = config or PlacementConfig()
        if host is not None and self.config.request_defaults:
            # The vendors parse requests with them (the webhook's host is this one).
            host.apply_request_defaults(self.config.request_defaults)
        if policy is None:
            policy = self.config.policy
        if isinstance(policy, str):
            registry = registry or policy_registry(host)
            policy = registry.create(policy, self.config.policy_options)
        self.policy: Policy = policy
        policy.attach(ledger)
        self._registry = registry
        #: The per-pod choice this placer decides for (``None``: the cluster's), and the
        #: placers of the other choices met, each built once (:meth:`for_request`).
        self.pod_policy: PodPolicy | None = None
        #: HAMi's topology-aware GPU policy in effect (the configured one here; a pod's own
        #: in its variant): the vendors' fits are told so in ``ContainerRequest``.
        self._topology = self.config.device_policy == TOPOLOGY
        self._topology_requests: dict[int, tuple[ContainerRequest, ContainerRequest]] = {}
        self._variants: dict[PodPolicy, Placer] = {}
        self._policies: dict[str, Policy] = {self.policy.name: self.policy}
        self._keys: dict[tuple[Any, ...], int] = {}
        self._by_state: dict[tuple[int, int], PodFit] = {}
        #: Per memo key: whether its answers depend on the node's state alone.
        self._share: dict[int, bool] = {}
        #: Per memo key not shared: whether nodes the vendors' own fits all leave to the
        #: core's (``NodeState.core_mark``) read their verdict from their state's shared
        #: answers (:meth:`_read`), as :meth:`_fill_where_core_decides` keeps them.
        self._core_reads: dict[int, bool] = {}
        self._tiebreaks_by_state: dict[tuple[int, tuple[int, int]], Score] = {}
        self._kinds: dict[int, dict[tuple[Any, ...], bool]] = {}
        self._last_request: PodRequest | None = None
        self._last_key = 0
        self._last_generation = -1
        self._remembered: _Remembered | None = None
        self._keys_made = 0
        self._rng = random.Random(self.config.seed)
        self._custom: dict[str, VendorHandle] = {}
        self._scorers: dict[str, VendorHandle] = {}
        if host is not None:
            for name, handle in host.vendors.items():
                if handle.implements("xpushare_fit"):
                    self._custom[name] = handle
                if self.config.vendor_score_weight > 0 and handle.implements("xpushare_score"):
                    self._scorers[name] = handle
        #: The mark this placer leaves on nodes the core decides for all of its vendors
        #: with their own fits: one object per set of such vendors, so placers of one host
        #: (the per-pod policies' variants) read each other's marks.
        self._core_mark = _core_mark_of(frozenset(self._custom))
        self._tiebreaks = type(self.policy).tiebreak is not Policy.tiebreak
        self._pure = bool(getattr(self.policy, "state_pure", False))
        mode = self.config.device_policy
        #: The policy may choose the devices itself (``Policy.place``): not under an order
        #: the configuration or the pod imposes.
        self._policy_places = mode is None and device_order is None
        if device_order is not None:
            self._order = device_order
        elif mode is None:
            self._order = self.policy.device_order
        else:
            pick = fullest_first if mode == "binpack" else emptiest_first
            self._order = lambda node, table, demand: pick(table)

    # -- requests ------------------------------------------------------------------------------

    def request(self, pod: PodView) -> PodRequest:
        """Parse a pod with the vendors' hooks (``ValueError`` explains a bad request)."""
        if self.host is None:
            raise ValueError("this placer has no plugin host to parse pods; pass PodRequests")
        return pod_request(pod, self.host.vendors.values())

    # -- per-pod policies ------------------------------------------------------------------------

    def for_request(self, request: PodRequest) -> Placer:
        """The placer that decides for *request*: this one, or the one of its pod's policy
        annotations (built on first need and kept, so a pod's choice costs what a new pod
        shape does, once, and the fleet's answers for it are remembered like this one's)."""
        choice = request.policy
        if choice is None or choice == self.pod_policy:
            return self
        found = self._variants.get(choice)
        if found is not None:
            return found
        if len(self._variants) >= MAX_POD_POLICIES:
            self._variants.clear()
        normal = self._known(choice)
        found = self._variants.get(normal)
        if found is None:
            if self.pod_policy is None and self._same_as_mine(normal):
                found = self
            else:
                found = self._variants[normal] = self._variant(normal)
        self._variants[choice] = found
        return found

    def _known(self, choice: PodPolicy) -> PodPolicy:
        """*choice* with a node policy no one registered read as binpack, as HAMi reads it
        (so names nobody knows share one placer)."""
        name = choice.node
        if name is None or name in self._policies:
            return choice
        registry = self._registry = self._registry or policy_registry(self.host)
        if name in registry:
            return choice
        log.warning("a pod's node policy %r is not a registered policy: binpack, as HAMi", name)
        return dataclasses.replace(choice, node=BINPACK)

    def _same_as_mine(self, choice: PodPolicy) -> bool:
        """Whether *choice* decides as this placer does (it names the cluster's policy)."""
        return (
            choice.device is None
            and choice.weights is None
            and choice.node in (None, self.policy.name)
        )

    def _variant(self, choice: PodPolicy) -> Placer:
        """The placer of *choice* (its node policy registered): built once, kept."""
        name = choice.node
        policy = self.policy if name is None else self._policies.get(name)
        if policy is None and name is not None:
            registry = self._registry = self._registry or policy_registry(self.host)
            options = self.config.policy_options if name == self.config.policy else {}
            policy = self._policies[name] = registry.create(name, options)
            policy.on_model_error = self.policy.on_model_error
        assert policy is not None
        order: DeviceOrder | None = None
        if choice.device is not None or choice.weights is not None:
            # Weights alone sort by HAMi's device score under the cluster's device policy,
            # or HAMi's default GPU policy (spread) when none is configured.
            default = self.config.device_policy or SPREAD
            order = HamiDeviceOrder(choice.device or default, choice.weights)
        placer = Placer(
            self.ledger,
            policy,
            host=self.host,
            config=self.config,
            registry=self._registry,
            device_order=order,
        )
        placer.pod_policy = choice
        if choice.device is not None:  # the pod's GPU policy replaces the configured one
            placer._topology = choice.topology
        return placer

    def observe(self, request: PodRequest) -> None:
        """Teach every policy in use the pod's shape (one that learns the workload learns
        it from every pod, whichever policy the pod chose)."""
        for policy in self._policies.values():
            policy.observe(request)

    # -- the per-node answer ---------------------------------------------------------------------

    def _fitters(self, request: PodRequest) -> dict[str, Any] | None:
        if not self._custom:
            return None
        wanted = {
            v: self._vendor_fitter(h) for v, h in self._custom.items() if v in request.vendors
        }
        return wanted or None

    def _fit(self, node: NodeState, request: PodRequest, *, full: bool = False) -> PodFit:
        return fit_pod(node, request, self._order, full=full, custom=self._fitters(request))

    def verdict(self, node: NodeState, request: PodRequest) -> Verdict:
        """(True, score, None) when *request* fits *node*, else (False, why, main reason).

        Remembered until the node changes: in the node's memo, or where the answer depends
        on the node's state alone, in the answers every node in that state shares.
        """
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.verdict(node, request)
        key = self._memo_key(request)
        hit = self._read([node], key, self._share[key], request)[0]
        if hit is None:
            self._fill(request, key, [node])
            hit = self._read([node], key, self._share[key], request)[0]
        return hit  # type: ignore[return-value]

    def _memo_key(self, request: PodRequest) -> int:
        generation = self.policy.generation
        if request is self._last_request and generation == self._last_generation:
            return self._last_key
        full = (generation, request.key)
        key = self._keys.get(full)
        if key is None:
            if len(self._keys) >= MAX_MEMO_KEYS:
                self._keys.clear()
                self._share.clear()
                self._core_reads.clear()
            key = self._keys[full] = next(_memo_ids)
            self._keys_made += 1
            share = self._share[key] = self._pure and self._shareable(request)
            self._core_reads[key] = (
                not share and self._pure and self._core_decides_somewhere(request)
            )
        self._last_request, self._last_key = request, key
        self._last_generation = generation
        return key

    def _fill(self, request: PodRequest, key: int, nodes: Sequence[NodeState]) -> None:
        """Work out and remember the verdicts of *nodes*, which have none for *request*.

        Where the answer depends on the node's state alone, it is worked out once per state
        (nodes in one state share one dict of answers, ``NodeState.shared``). Fit is checked
        node by node; the policy then scores all the nodes that fit in one call, which lets
        the fragmentation policies measure them together on arrays.
        """
        if not self._share[key]:
            if self._pure and self._core_decides_somewhere(request):
                self._fill_where_core_decides(request, key, nodes)
            else:
                self._answer(request, key, nodes)
            return None
        # One node per shared dict (comprehensions: at 5,000 nodes each Python statement
        # per node costs a millisecond).
        firsts = dict(zip(map(id, map(_shared_of, reversed(nodes))), reversed(nodes), strict=True))
        todo = [node for node in firsts.values() if key not in node.shared]
        if todo:
            self._answer(request, key, todo)
        return None

    def _mark(self, node: NodeState) -> None:
        """Leave :attr:`_core_mark` on *node* when the core's fit decides on each of its
        tables that a vendor with a fit of its own owns (each table asked once)."""
        ledger = self.ledger
        for vendor, table in node.tables.items():
            handle = self._custom.get(vendor)
            if handle is not None and vendor_fit_applies(ledger, handle, node.name, table):
                return
        node.core_mark = self._core_mark

    def _core_decides_somewhere(self, request: PodRequest) -> bool:
        """Whether a request not shared for its vendor's own fit may still be, on the nodes
        where that fit leaves the decision to the core's (``xpushare_fit_applies``): no UUIDs
        (the signatures leave them out), no partition or mode and no topology-aware policy
        (the vendor's fit is asked everywhere then, placer._vendor_fitter)."""
        return not self._topology and not any(
            d.include_uuids or d.exclude_uuids or d.partition is not None or d.mode is not None
            for d in request.demands
        )

    def _fill_where_core_decides(
        self, request: PodRequest, key: int, nodes: Sequence[NodeState]
    ) -> None:
        """:meth:`_fill` for a vendor with its own fit: nodes where the core decides share one
        answer per state (kept with the state's shared answers, so nodes that come to that
        state later find it), the others are answered one by one.

        Why: NVIDIA's fit applies only to MIG and NVLink nodes (its ``xpushare_fit_applies``),
        yet a vendor with a fit of its own made every verdict a per-node one, so each node
        that changed cost a fit and a score for every pod shape asked (in bench_throughput's
        NVIDIA run, the largest part of ``/prioritize``). The answer is the core's there,
        which depends on the node's state alone, as :meth:`_shareable` requests' do.
        """
        own: list[NodeState] = []
        waiting: list[NodeState] = []
        mark = self._core_mark
        # Nodes marked as the core's for every vendor with a fit of its own (most, once
        # their tables were asked) need no per-node step: they read their state's shared
        # answers (:meth:`_read`), so only the states without one are worked out, as for
        # a request without such vendors (comprehensions: a cold fill meets every node).
        marked = [n for n in nodes if n.core_mark is mark]
        rest = [n for n in nodes if n.core_mark is not mark] if len(marked) < len(nodes) else []
        # The request's vendors with a fit of their own, once per call; per node, the
        # table's cached answer is read inline (this loop meets every unmarked candidate
        # whose memo lacks the request).
        custom = [
            (d.vendor, handle)
            for d in request.demands
            if (handle := self._custom.get(d.vendor)) is not None
        ]
        ledger = self.ledger
        for node in rest:
            decides = True
            for vendor, handle in custom:
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
            self._mark(node)
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
            firsts = dict(zip(map(id, map(_shared_of, unanswered)), unanswered, strict=True))
            todo = list(firsts.values())
            if todo:
                self._answer(request, key, todo, core=True)  # kept with the states' answers
            for node in waiting:
                remember(node.memo, key, node.shared[key], node.memo_limit)
        if own:
            self._answer(request, key, own)

    def _answer(
        self, request: PodRequest, key: int, nodes: Sequence[NodeState], *, core: bool = False
    ) -> list[Verdict]:
        """Fit each node, then score the ones that fit in one call; remembered.

        ``core``: the vendors' own fits leave every one of *nodes* to the core's
        (:meth:`_fill_where_core_decides`), so a one-container pod takes the shared path
        of a vendor without a fit of its own: the table summaries and the policy's arrays
        decide, instead of a vendor fit asked and a device walk per node (with NVIDIA, a
        third of a cold fill's time). Refusals then walk the devices as the vendor's path
        does (no summary shortcut), so they read the same. The verdicts are kept with the
        nodes' states' answers (``NodeState.shared``), which such nodes read.
        """
        out: list[Verdict | None] = [None] * len(nodes)
        scoring: list[int] = []
        demands = request.demands
        single = len(demands) == 1 and not demands[0].init and (core or self._shareable(request))
        fit_in_score = single and self.policy.fits_in_score
        kinds = self._kind_fits(key, demands[0]) if single and not fit_in_score else None
        demand = demands[0] if demands else None
        # Refusals alike (same reasons, count and failing demand, so the same message) share
        # one verdict: a memo entry then costs a pointer, not a fit per node.
        refused: dict[tuple[Any, ...], Verdict] = {}
        for i, node in enumerate(nodes):
            if fit_in_score:
                # The policy tells which nodes' devices cannot take the pod (answering
                # None): here only the host resources and the table summaries (O(1)) are
                # checked, which turn most nodes away when few can take the pod.
                reason = host_reject(node, request)
                if reason is not None:
                    out[i] = (False, HOST_REJECTS[reason], reason)
                    continue
                table = node.tables.get(demand.vendor)  # type: ignore[union-attr]
                if table is not None and quick_reject(table, demand) is None:  # type: ignore[arg-type]
                    scoring.append(i)
                    continue
            if kinds is not None and host_reject(node, request) is None:
                # The fit read from the node's kinds of devices: any ``count`` devices
                # that each fit (the device walk below runs only where it does not, to
                # say why).
                table = node.tables.get(demand.vendor)  # type: ignore[union-attr]
                usable = 0
                if table is not None:
                    for sig, n in table.kind_counts or table.kinds():
                        ok = kinds.get(sig)
                        if ok is None:
                            ok = kinds[sig] = sig_can_host(sig, demand)  # type: ignore[arg-type]
                        if ok:
                            usable += n
                if usable >= demand.count:  # type: ignore[union-attr]
                    scoring.append(i)
                    continue
            if single:
                fit = self._fit_single(node, request, demands[0], key, quick=not core)
            else:
                fit = fit_pod(node, request, custom=self._fitters(request))
            if fit.fits:
                scoring.append(i)
            else:
                # The message is built when someone reads it (filter), not for every node.
                alike = (tuple(fit.reasons.items()), fit.examined, id(fit.failed))
                found = refused.get(alike)
                if found is None:
                    found = refused[alike] = (False, fit, fit.primary())
                out[i] = found
        if scoring:
            scores = self.policy.score_many([nodes[i] for i in scoring], request)
            # Nodes with equal scores share one verdict, so a memo entry costs a pointer, not
            # a tuple per node. Not with a tie-break: that is worked out for one node of
            # each distinct verdict and given to all its nodes (_keys_by_verdict).
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
                    self._fit_single(nodes[i], request, demands[0], key, quick=not core)
                    if single
                    else None
                )
                if why is None or why.fits:  # the policy disagrees: never turn a node away
                    log.warning("policy %s: no score for a node the pod fits", self.policy.name)
                    out[i] = (True, _LOWEST, None)
                else:
                    out[i] = (False, why, why.primary())
        share = core or self._share[key]
        for node, v in zip(nodes, out, strict=True):
            memo = node.shared if share else node.memo
            if len(memo) >= node.memo_limit:  # state.remember(), inline: once per node
                del memo[next(iter(memo))]
            memo[key] = v
        return out  # type: ignore[return-value]

    def _shareable(self, request: PodRequest) -> bool:
        """Whether a verdict may be shared by nodes whose device tables look the same.

        Not when a vendor's own fit decides (it may look at anything) or when the request
        names device UUIDs (the table signature leaves them out).
        """
        return not any(
            d.include_uuids or d.exclude_uuids or d.vendor in self._custom for d in request.demands
        )

    def _kind_fits(self, key: int, demand: Demand) -> dict[tuple[Any, ...], bool] | None:
        """Whether a device in each state (signature) fits *demand*, filled as met; ``None``
        when a signature does not decide it (partitions; NUMA-bound multi-device demands)."""
        if demand.partition is not None or (demand.numa_bind and demand.count > 1):
            return None
        found = self._kinds.get(key)
        if found is None:
            if len(self._kinds) >= _MAX_REQUEST_KINDS:
                self._kinds.clear()
            found = self._kinds[key] = {}
        return found

    def _fit_single(
        self, node: NodeState, request: PodRequest, demand: Demand, key: int, *, quick: bool = True
    ) -> PodFit:
        """Feasibility of a one-container pod, shared between nodes in the same device state.

        Where the pod goes on the node does not matter here (the winner's devices are chosen
        by :meth:`decide`), so nodes whose tables have the same signature get one answer.
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
            if len(self._by_state) >= _MAX_STATE_ANSWERS:
                self._by_state.clear()
            fit = self._by_state[skey] = fit_alone(table, demand, quick=quick)
        return fit

    def _nodes(self, names: Iterable[str] | None) -> Iterable[tuple[str, NodeState | None]]:
        nodes = self.ledger.nodes
        if names is None:
            return nodes.items()
        return ((n, nodes.get(n)) for n in names)

    def _unknown(self, request: PodRequest) -> Verdict:
        if request.wants_devices:
            return (False, UNKNOWN_NODE, FitReason.NO_DEVICES)
        return (True, _LOWEST, None)

    # -- extender calls --------------------------------------------------------------------------

    def filter(
        self, request: PodRequest, nodes: Iterable[str] | None = None, *, observe: bool = True
    ) -> FilterResult:
        """Which of *nodes* (all the ledger's when ``None``) the pod fits, and why not
        (``observe=False``: without teaching the policy the request's shape)."""
        if observe:
            self.observe(request)
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.filter(request, nodes, observe=False)
        names, verdicts = self._verdicts(request, nodes)
        out = FilterResult(fits=[n for n, v in zip(names, verdicts, strict=True) if v[0]])
        if len(out.fits) < len(names):
            out.failed = {
                n: v[1].message() if isinstance(v[1], PodFit) else v[1]
                for n, v in zip(names, verdicts, strict=True)
                if not v[0]
            }
        return out

    def _verdicts(
        self, request: PodRequest, nodes: Iterable[str] | None, *, limit: int | None = None
    ) -> tuple[list[str], list[Verdict]]:
        """The names of *nodes* and each one's verdict (the loop of /filter).

        Written as comprehensions: at 5,000 nodes each Python statement per node costs
        a millisecond. Nodes without a remembered verdict are answered together after;
        with *limit*, only when at most that many lack one (else :class:`_TooCold`).
        """
        made = self._keys_made
        key = self._memo_key(request)
        table = self.ledger.nodes
        if nodes is None:
            names = list(table)
            states: list[NodeState | None] = list(table.values())
        else:
            names = nodes if isinstance(nodes, list) else list(nodes)
            states = list(map(table.get, names))
        share = self._share[key]
        if self._keys_made != made and states and None not in states:
            # A key made just now (a new pod shape or workload generation): no node has
            # a verdict under it (keys are never reused), so every node is filled without
            # a first pass over the memos (at 5,000 nodes half a millisecond of the
            # decision that meets the shape first, which sets the p99).
            if limit is not None and len(states) > limit:
                raise _TooCold
            self._fill(request, key, states)  # type: ignore[arg-type]
            return names, self._read(states, key, share, request)  # type: ignore[return-value]
        verdicts = self._read(states, key, share, request)
        if None in verdicts:
            todo = [i for i, v in enumerate(verdicts) if v is None]
            if limit is not None and len(todo) > limit:
                raise _TooCold
            if len(todo) == len(states):  # a new pod shape: every node
                self._fill(request, key, states)  # type: ignore[arg-type]
            else:
                self._fill(request, key, [states[i] for i in todo])  # type: ignore[misc]
            if len(todo) * 4 < len(verdicts):
                fresh = self._read([states[i] for i in todo], key, share, request)
                for i, verdict in zip(todo, fresh, strict=True):
                    verdicts[i] = verdict
            else:  # mostly new (a new pod shape): read them all again, at C speed
                verdicts = self._read(states, key, share, request)
        return names, verdicts  # type: ignore[return-value]

    def _read(
        self, states: list[NodeState | None], key: int, share: bool, request: PodRequest
    ) -> list[Verdict | None]:
        """The remembered verdict of each node (``None``: none yet).

        For a request of vendors with fits of their own (``_core_reads``), a node those
        fits all leave to the core's (``NodeState.core_mark``, left by :meth:`_mark` once
        its tables were asked) reads its state's shared answers, which
        :meth:`_fill_where_core_decides` keeps for such nodes only; any other node, its own
        memo. Why: the vendor's nodes then need no answer of their own per pod shape (with
        per-node memos, each of 5,000 nodes missed once per shape and workload
        generation, and /filter fell back to its slower path for tens of calls after each),
        and the mark is one attribute where the tables' answers were three lookups a node.
        """
        try:  # (no test for unknown nodes first: a pass over 5,000 nodes costs 0.2 ms)
            if share:
                return [s.shared.get(key) for s in states]  # type: ignore[union-attr]
            if self._core_reads.get(key):
                mark = self._core_mark
                return [
                    (s.shared if s.core_mark is mark else s.memo).get(key)  # type: ignore[union-attr]
                    for s in states
                ]
            return [s.memo.get(key) for s in states]  # type: ignore[union-attr]
        except AttributeError:  # nodes the ledger does not know
            unknown = self._unknown(request)
            return [
                self._read([s], key, share, request)[0] if s is not None else unknown
                for s in states
            ]

    def warm(self, request: PodRequest, names: list[str]) -> None:
        """Work out and remember the verdicts of *names* (those not remembered yet).

        For a caller that asks about many nodes in slices, giving the event loop back in
        between (the scheduler's extender, scheduler/bounds.py): its last call over every
        node then reads verdicts remembered, and works out only the nodes changed since.
        """
        if request.policy is not None and (other := self.for_request(request)) is not self:
            other.warm(request, names)
            return
        self._verdicts(request, names)

    def warm_verdicts(self, request: PodRequest, names: list[str]) -> list[Verdict] | None:
        """Each of *names*' verdict, when at most :data:`WARM_FILL` of them lack one
        (``None`` otherwise: ask :class:`~xpushare.scheduler.feasible.FeasibilityChecker`).

        What /filter asks first: the verdicts of the nodes that fit are remembered, and the
        /prioritize of the same pod, which kube-scheduler sends next with exactly those
        nodes, reads them back (:meth:`prioritize_each`) instead of reading 500 memos again;
        the nodes that changed in between are asked again, so the answer is the one a fresh
        read would give. Not for vendors that score nodes themselves (``xpushare_score``).
        """
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.warm_verdicts(request, names)
        made = self._keys_made
        key = self._memo_key(request)
        if self._scorers or self._keys_made != made:
            # A shape (or workload generation) not asked before: no verdict is known, so
            # the pass over the memos is skipped too (a stream of distinct shapes).
            self._remembered = None
            return None
        try:
            names, verdicts = self._verdicts(request, names, limit=WARM_FILL)
        except _TooCold:
            self._remembered = None
            return None
        fitting = [v[0] for v in verdicts]
        self._remembered = _Remembered(
            key,
            self.ledger.clock,
            list(itertools.compress(names, fitting)),
            list(itertools.compress(verdicts, fitting)),
        )
        return verdicts

    def _recall(self, request: PodRequest, names: list[str]) -> list[Verdict] | None:
        """The verdicts :meth:`warm_verdicts` remembered, when *names* are the nodes they
        were for and the request's key is theirs; the nodes changed since are read again."""
        known = self._remembered
        if known is None or known.key != self._memo_key(request) or names != known.names:
            return None
        changed = self.ledger.changed_since(known.clock)
        if changed is None:
            return None
        at = [i for i, name in enumerate(names) if name in changed] if changed else []
        if not at:
            return known.verdicts
        verdicts = list(known.verdicts)
        _, fresh = self._verdicts(request, [names[i] for i in at])
        for i, verdict in zip(at, fresh, strict=True):
            verdicts[i] = verdict
        return verdicts

    def scores(self, request: PodRequest, nodes: Iterable[str] | None = None) -> dict[str, Score]:
        """The policy's score of every fitting node, as a key: higher is better.

        A key is a tuple compared element by element (a policy may rank by a second
        criterion among nodes equal on the first).
        """
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.scores(request, nodes)
        names, verdicts = self._verdicts(request, nodes)
        if self._scorers:
            out = {n: v[1] for n, v in zip(names, verdicts, strict=True) if v[0]}
            return {n: (v,) for n, v in self._blend(request, out).items()} if out else out
        keys = self._keys_by_verdict(request, names, verdicts)
        return _by_name(names, verdicts, keys)

    def _keys_by_verdict(
        self, request: PodRequest, names: list[str], verdicts: list[Verdict]
    ) -> dict[int, Score]:
        """The key of each fitting verdict, by the verdict's identity.

        Nodes in one state share their verdict (the same object), so the ranking is worked
        out once per distinct verdict (a few hundred at 5,000 nodes) and the per-node work
        is one lookup. The policy's tie-break is computed only where it decides: for the
        distinct verdicts tied at the top, which spares its cost everywhere else.
        """
        distinct = dict(zip(map(id, verdicts), verdicts, strict=True))
        keys: dict[int, Score] = {i: v[1] for i, v in distinct.items() if v[0]}
        if not self._tiebreaks or len(keys) < 2:
            return keys
        best = max(keys.values())
        top = [i for i, k in keys.items() if k == best]
        if len(top) > 1:
            nodes = self.ledger.nodes
            named = dict(zip(map(id, verdicts), names, strict=True))
            for i in top:
                state = nodes.get(named[i])
                if state is not None:
                    keys[i] = best + self._tiebreak(state, request)
        return keys

    def _tiebreak(self, state: NodeState, request: PodRequest) -> Score:
        key = (self._memo_key(request), 1)
        found: Score | None = state.memo.get(key)
        if found is not None:
            return found
        skey = (state.state_id(), key) if self._pure and self._shareable(request) else None
        if skey is not None:
            found = self._tiebreaks_by_state.get(skey)
        if found is None:
            found = score_key(self.policy.tiebreak(state, request))
            if skey is not None:
                if len(self._tiebreaks_by_state) >= _MAX_STATE_ANSWERS:
                    self._tiebreaks_by_state.clear()
                self._tiebreaks_by_state[skey] = found
        state.remember(key, found)
        return found

    def prioritize(
        self, request: PodRequest, nodes: Iterable[str] | None = None
    ) -> dict[str, float]:
        """Scores of the fitting nodes scaled to [0, 100]; others are left out.

        The best nodes get 100; the others are placed in [0, 99] by the first element of
        their key, so a node second only on a tie-break criterion still scores below them.
        """
        if nodes is None:
            names = list(self.ledger.nodes)
        else:
            names = nodes if isinstance(nodes, list) else list(nodes)
        return {
            name: score
            for name, score in zip(names, self.prioritize_each(request, names), strict=True)
            if score is not None
        }

    def prioritize_each(self, request: PodRequest, names: list[str]) -> list[float | None]:
        """:meth:`prioritize`'s score of each of *names*, in their order (``None``: the node
        does not fit or is unknown).

        What /prioritize answers with: one list aligned with the names it was asked about,
        read per node through its verdict's identity, instead of a dict by name that the
        answer then looks up again name by name (two passes over 500 strings a call).
        """
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.prioritize_each(request, names)
        if self._scorers:
            by_name = self._scale(self.scores(request, names))
            return list(map(by_name.get, names))
        verdicts = self._recall(request, names)
        if verdicts is None:
            names, verdicts = self._verdicts(request, names)
        scaled = self._scale(self._keys_by_verdict(request, names, verdicts))
        return list(map(scaled.get, map(id, verdicts)))

    @staticmethod
    def _scale(raw: Mapping[Any, Score]) -> dict[Any, float]:
        """Keys scaled to [0, 100]: the best 100, the others by their first element."""
        if not raw:
            return {}
        keys = set(raw.values())
        best = max(keys)
        firsts = [k[0] for k in keys if k[0] != float("-inf")]
        low, high = (min(firsts), max(firsts)) if firsts else (0.0, 0.0)
        span = (high - low) or 1.0
        scaled: dict[Score, float] = {}
        for key in keys:
            if key == best:
                scaled[key] = 100.0
            elif key[0] == float("-inf"):
                scaled[key] = 0.0
            else:
                scaled[key] = min(99.0, 99.0 * (key[0] - low) / span)
        return {name: scaled[key] for name, key in raw.items()}

    def select(self, request: PodRequest, nodes: Iterable[str] | None = None) -> str | None:
        """The best node for the pod among *nodes* (``None`` if it fits none)."""
        self.observe(request)
        return self.for_request(request)._select(request, nodes)

    def _select(self, request: PodRequest, nodes: Iterable[str] | None) -> str | None:
        if self._scorers or nodes is not None:
            return self._pick_best(self.scores(request, nodes).items())
        # The hot loop of the simulator and of /filter-sized decisions: no generator, no
        # name lookups, the memo read inline; nodes without an answer are answered together
        # after the loop and merged in ledger order.
        key = self._memo_key(request)
        top: list[NodeState] = []
        missing: list[NodeState] = []
        best_score: Score = _LOWEST
        share = self._share[key]
        # Nodes marked as the core's read their state's answers, as in _read (their own
        # memo lacks them); no node carries _UNMARKED, so other keys read the memo.
        mark = self._core_mark if self._core_reads.get(key) else _UNMARKED
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
            self._fill(request, key, missing)
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
        if not top:
            return None
        if len(top) > 1 and self._tiebreaks:
            keys = [self._tiebreak(state, request) for state in top]
            best_key = max(keys)
            top = [state for state, k in zip(top, keys, strict=True) if k == best_key]
        if len(top) > 1 and self.config.tie_break == "random":
            return self._rng.choice(top).name
        return top[0].name

    def _pick_best(self, scored: Iterable[tuple[str, Score]]) -> str | None:
        """The highest key; among equal keys the first, or one at random (seeded)."""
        items = list(scored)
        if not items:
            return None
        best = max(k for _, k in items)
        top = [name for name, k in items if k == best]
        if len(top) > 1 and self.config.tie_break == "random":
            return self._rng.choice(top)
        return top[0]

    def failure_tally(
        self, request: PodRequest, nodes: Iterable[str] | None = None
    ) -> Counter[FitReason]:
        """How many of *nodes* turn the pod down for each main reason."""
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.failure_tally(request, nodes)
        tally: Counter[FitReason] = Counter()
        for _, state in self._nodes(nodes):
            ok, _, reason = (
                self.verdict(state, request) if state is not None else self._unknown(request)
            )
            if not ok and reason is not None:
                tally[reason] += 1
        return tally

    def decide(self, request: PodRequest, node: str) -> PodAssignment:
        """The devices each container gets on *node*; :class:`NoFit` if it does not fit."""
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.decide(request, node)
        state = self.ledger.node(node)
        if state is None:
            if request.wants_devices:
                raise NoFit(f"node {node}: {UNKNOWN_NODE}")
            return PodAssignment(node=node, containers=())
        fit = None
        if self._policy_places and not (request.vendors & self._custom.keys()):
            fit = self.policy.place(state, request)
        if fit is None:
            fit = self._fit(state, request)
        if not fit.fits:
            raise NoFit(f"node {node}: {fit.message()}")
        return PodAssignment(
            node=node,
            containers=tuple(
                ContainerAssignment(
                    container=demand.container,
                    vendor=demand.vendor,
                    init=demand.init,
                    devices=slices(picks),
                )
                for demand, picks in fit.picks
            ),
        )

    def place(self, request: PodRequest, nodes: Iterable[str] | None = None) -> Decision | None:
        """Select the best node and decide the devices there (``None``: fits nowhere)."""
        node = self.select(request, nodes)
        if node is None:
            return None
        state = self.ledger.node(node)
        score = self.verdict(state, request)[1] if state is not None else _LOWEST
        return Decision(node=node, score=score[0], assignment=self.decide(request, node))

    def commit(
        self, key: str, request: PodRequest, assignment: PodAssignment, *, reserved: bool = False
    ) -> None:
        """Count a placed pod (or, with ``reserved``, a decision not yet bound)."""
        self.ledger.add(
            key,
            assignment,
            cpu_milli=request.cpu_milli,
            memory_mib=request.memory_mib,
            reserved=reserved,
            namespace=request.pod.namespace if request.pod is not None else "",
        )

    # -- explanations ----------------------------------------------------------------------------

    def explain(self, request: PodRequest, node: str) -> NodeFit:
        """Everything about one pod on one node: per container, devices and reasons."""
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.explain(request, node)
        state = self.ledger.node(node)
        if state is None:
            ok, _, _ = self._unknown(request)
            return NodeFit(node=node, fits=ok, reason="" if ok else UNKNOWN_NODE)
        host = host_reject(state, request)
        if host is not None:
            return NodeFit(node=node, fits=False, reason=host.value)
        results: list[FitResult] = []
        extra: Extra = {}
        fits = True
        reason = ""
        fitters = self._fitters(request) or {}
        for demand in request.demands:
            table = state.tables.get(demand.vendor)
            if table is None or not table.devices:
                results.append(
                    FitResult(
                        fits=False,
                        reasons={FitReason.NO_DEVICES: 1},
                        message=f"node has no {demand.vendor} devices",
                    )
                )
                fits, reason = False, results[-1].message
                break
            use = None if demand.init else extra
            order = self._order(state, table, demand)
            fitter = fitters.get(demand.vendor)
            answer = fitter(state, table, demand, order, use, True) if fitter else None
            note = ""
            if answer is None:
                picks, reasons = fit_demand(table, demand, order, use, full=True)
            else:
                picks, reasons, note = answer
            if picks is None:
                message = summarize(reasons, len(table.devices), demand, note)
                results.append(FitResult(fits=False, reasons=dict(reasons), message=message))
                fits, reason = False, message
                break
            results.append(FitResult(fits=True, devices=slices(picks), reasons=dict(reasons)))
            if not demand.init:
                add_extra(extra, picks)
        score = 0.0
        if fits:
            ok, value, _ = self.verdict(state, request)
            if ok:
                score = value[0]
                # The policy may choose other devices than the plain walk above: show those.
                assignment = self.decide(request, node)
                results = [
                    r.model_copy(update={"devices": c.devices})
                    for r, c in zip(results, assignment.containers, strict=False)
                ]
        return NodeFit(node=node, fits=fits, containers=tuple(results), score=score, reason=reason)

    # -- vendors with a fit or a score of their own ----------------------------------------------

    def _told_topology(self, request: ContainerRequest) -> ContainerRequest:
        """*request* marked topology-aware: one copy per request, not one per node asked."""
        hit = self._topology_requests.get(id(request))
        if hit is not None and hit[0] is request:
            return hit[1]
        if len(self._topology_requests) >= MAX_MEMO_KEYS:
            self._topology_requests.clear()
        told = request.model_copy(update={"topology_aware": True})
        self._topology_requests[id(request)] = (request, told)
        return told

    def _vendor_fitter(self, handle: VendorHandle) -> Any:
        ledger = self.ledger
        topology = self._topology

        def fitter(
            node: NodeState,
            table: DeviceTable,
            demand: Demand,
            order: Sequence[DeviceState] | None,
            extra: Extra | None,
            full: bool,
        ) -> tuple[list[Pick] | None, dict[FitReason, int], str] | None:
            applies = vendor_fit_applies(ledger, handle, node.name, table)
            if not applies and demand.partition is None and demand.mode is None and not topology:
                # The vendor said its fit leaves such a node to the default: skip building
                # the views it would be given (tens of microseconds a node). A demand that
                # names a mode is the vendor's to judge: the core does not know modes, nor
                # what the vendor knows of its devices' links (topology-aware).
                return None
            usage = _usage_with(table, extra, idle=demand.idle)
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

    def _blend(self, request: PodRequest, keys: Mapping[str, Score]) -> dict[str, float]:
        """Mix the vendors' own scores (in [0, 1]) into the policy's, by the configured weight."""
        weight = self.config.vendor_score_weight
        raw = {n: k[0] for n, k in keys.items()}
        low, high = min(raw.values()), max(raw.values())
        span = (high - low) or 1.0
        out: dict[str, float] = {}
        for name, s in raw.items():
            policy_part = (s - low) / span if high > low else 1.0
            vendor_scores = []
            for demand in request.demands:
                handle = self._scorers.get(demand.vendor)
                if handle is None:
                    continue
                node_view = self.ledger.node_view(name, demand.vendor)
                usage = self.ledger.device_usage(name, demand.vendor)
                state = self.ledger.node(name)
                table = state.tables.get(demand.vendor) if state is not None else None
                if table is None:
                    continue
                picks, reasons = fit_demand(table, demand, self._order(state, table, demand))  # type: ignore[arg-type]
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


def _by_name(names: list[str], verdicts: list[Verdict], values: Mapping[int, _T]) -> dict[str, _T]:
    """Per node name, the value of its verdict (by identity); nodes without one left out."""
    return {
        n: x
        for n, x in zip(names, map(values.get, map(id, verdicts)), strict=True)
        if x is not None
    }


#: A node's answers shared with its state, and its own (C-level, for map()).
_shared_of: Callable[[NodeState], dict[Any, Any]] = operator.attrgetter("shared")


class _TableUsage(Mapping[str, DeviceUsage]):
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


def _usage_with(
    table: DeviceTable, extra: Extra | None, *, idle: bool = False
) -> Mapping[str, DeviceUsage]:
    return _TableUsage(table, extra, idle)


__all__ = [
    "UNKNOWN_NODE",
    "Decision",
    "FilterResult",
    "NoFit",
    "Placer",
    "policy_registry",
]

"""The placement engine the extender and the simulator share: a request, the nodes that
can take it, how good each is, the choice.

Why one engine: a policy measured in the simulator must be the policy the cluster runs, so
``xpushare simulate`` replays a trace through exactly the calls the extender makes for each
pod (parse with the vendors' hooks, filter the candidate nodes, score them, decide the
devices on the chosen node, count it in the ledger).

The pipeline, top-down (docs/scheduler.md draws it):

1. :meth:`Placer.request` parses a pod with the vendors' hooks; :meth:`Placer.for_request`
   hands a pod with its own policy annotations to that choice's placer (variants.py);
2. each node's **verdict** (fits and score, or why not) comes from the
   :class:`~xpushare.placement.verdicts.VerdictCache`, the one interface behind which the
   speed work lives (answers shared by nodes in one state, the policy's arrays, warm
   verdicts); its docstring is its contract;
3. :class:`~xpushare.placement.ranking.Ranker` orders the fitting nodes (the policy's
   tie-break where it decides) and picks one;
4. :meth:`Placer.decide` chooses the devices on that node (the core's fit, the policy's
   ``place`` or a vendor's own fit), and :meth:`Placer.commit` counts it in the ledger,
   the fleet's state kept in one place.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from xpushare.models import ContainerAssignment, FitReason, NodeFit, PodAssignment
from xpushare.placement.config import PlacementConfig
from xpushare.placement.explain import walk_containers
from xpushare.placement.ranking import Ranker, by_name, scale
from xpushare.placement.requests import pod_request
from xpushare.placement.results import (
    LOWEST,
    UNKNOWN_NODE,
    Decision,
    FilterResult,
    NoFit,
    Score,
    Verdict,
)
from xpushare.placement.variants import Variants, policy_registry
from xpushare.placement.vendorfit import VendorFits, vendor_fit_applies
from xpushare.placement.verdicts import VerdictCache, unknown_verdict
from xpushare.scheduling import PodFit, fit_pod, host_reject
from xpushare.scheduling.fit import slices
from xpushare.scheduling.podpolicy import TOPOLOGY
from xpushare.scheduling.policies import emptiest_first, fullest_first

if TYPE_CHECKING:
    from collections.abc import Iterable

    from xpushare.models import PodView
    from xpushare.placement.ranking import FloatArray
    from xpushare.plugins import PluginHost
    from xpushare.scheduling import PodRequest, Policy, PolicyRegistry, UsageLedger
    from xpushare.scheduling.fit import DeviceOrder
    from xpushare.scheduling.podpolicy import PodPolicy
    from xpushare.scheduling.state import NodeState


class Placer:
    """Filter, score and decide placements against a :class:`UsageLedger`.

    ``policy`` is a :class:`Policy` or the name of a registered one (options from
    ``config.policy_options``). ``host`` provides the vendors: their request parsing and,
    for vendors that implement ``xpushare_fit``, their own fit; without a host only the
    core's default fit is used and pods must come as :class:`PodRequest`. ``pod_policy``:
    the per-pod choice this placer decides for (``None``: the cluster's).
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
        pod_policy: PodPolicy | None = None,
    ) -> None:
        self.ledger = ledger
        self.host = host
        config = self.config = config or PlacementConfig()
        if host is not None and config.request_defaults:
            # The vendors parse requests with them (the webhook's host is this one).
            host.apply_request_defaults(config.request_defaults)
        if policy is None:
            policy = config.policy
        if isinstance(policy, str):
            registry = registry or policy_registry(host)
            policy = registry.create(policy, config.policy_options)
        self.policy: Policy = policy
        policy.attach(ledger)
        self.pod_policy = pod_policy
        self.variants: Variants[Placer] = Variants(policy, config, host, registry, self._variant)
        # HAMi's topology-aware GPU policy: the configured one, or a pod's own GPU policy.
        if pod_policy is not None and pod_policy.device is not None:
            topology = pod_policy.topology
        else:
            topology = config.device_policy == TOPOLOGY
        self.vendors = VendorFits(
            ledger, host, score_weight=config.vendor_score_weight, topology=topology
        )
        self.cache = VerdictCache(ledger, policy, self.vendors, topology=topology)
        self.ranker = Ranker(
            ledger, policy, self.cache.keys, tie_break=config.tie_break, seed=config.seed
        )
        mode = config.device_policy
        #: The policy may choose the devices itself (``Policy.place``): not under an order
        #: the configuration or the pod imposes.
        self._policy_places = mode is None and device_order is None
        self._order: DeviceOrder
        if device_order is not None:
            self._order = device_order
        elif mode is None:
            self._order = policy.device_order
        else:
            pick = fullest_first if mode == "binpack" else emptiest_first
            self._order = lambda node, table, demand: pick(table)

    def _variant(self, policy: Policy, order: DeviceOrder | None, choice: PodPolicy) -> Placer:
        return Placer(
            self.ledger,
            policy,
            host=self.host,
            config=self.config,
            registry=self.variants.registry,
            device_order=order,
            pod_policy=choice,
        )

    # -- requests ------------------------------------------------------------------------------

    def request(self, pod: PodView) -> PodRequest:
        """Parse a pod with the vendors' hooks (``ValueError`` explains a bad request)."""
        if self.host is None:
            raise ValueError("this placer has no plugin host to parse pods; pass PodRequests")
        return pod_request(pod, self.host.vendors.values())

    def for_request(self, request: PodRequest) -> Placer:
        """The placer that decides for *request*: this one, or its pod policy choice's."""
        choice = request.policy
        if choice is None or choice == self.pod_policy:
            return self
        return self.variants.placer(self, self.pod_policy, choice)

    def observe(self, request: PodRequest) -> None:
        """Teach every policy in use the pod's shape (one that learns the workload learns
        it from every pod, whichever policy the pod chose)."""
        for policy in self.variants.policies.values():
            policy.observe(request)

    # -- which nodes fit, and how well -----------------------------------------------------------

    def verdict(self, node: NodeState, request: PodRequest) -> Verdict:
        """(True, score, None) when *request* fits *node*, else (False, why, main reason)."""
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.verdict(node, request)
        return self.cache.verdict(node, request)

    def filter(
        self, request: PodRequest, nodes: Iterable[str] | None = None, *, observe: bool = True
    ) -> FilterResult:
        """Which of *nodes* (all the ledger's when ``None``) the pod fits, and why not
        (``observe=False``: without teaching the policy the request's shape)."""
        if observe:
            self.observe(request)
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.filter(request, nodes, observe=False)
        names, verdicts = self.cache.verdicts(request, nodes)
        out = FilterResult(fits=[n for n, v in zip(names, verdicts, strict=True) if v[0]])
        if len(out.fits) < len(names):
            out.failed = {
                n: v[1].message() if isinstance(v[1], PodFit) else v[1]
                for n, v in zip(names, verdicts, strict=True)
                if not v[0]
            }
        return out

    def warm(self, request: PodRequest, names: list[str]) -> None:
        """Work out and remember the verdicts of *names*, for a caller that asks about many
        nodes in slices, giving the event loop back in between (scheduler/bounds.py)."""
        if request.policy is not None and (other := self.for_request(request)) is not self:
            other.warm(request, names)
            return
        self.cache.verdicts(request, names)

    def warm_verdicts(self, request: PodRequest, names: list[str]) -> list[Verdict] | None:
        """/filter's verdicts, kept for the /prioritize after (``VerdictCache.warm_verdicts``;
        ``None``: ask :class:`~xpushare.scheduler.feasible.FeasibilityChecker`)."""
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.warm_verdicts(request, names)
        return self.cache.warm_verdicts(request, names)

    def failure_tally(
        self, request: PodRequest, nodes: Iterable[str] | None = None
    ) -> Counter[FitReason]:
        """How many of *nodes* turn the pod down for each main reason."""
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.failure_tally(request, nodes)
        tally: Counter[FitReason] = Counter()
        table = self.ledger.nodes
        for state in table.values() if nodes is None else map(table.get, nodes):
            ok, _, reason = (
                self.cache.verdict(state, request)
                if state is not None
                else unknown_verdict(request)
            )
            if not ok and reason is not None:
                tally[reason] += 1
        return tally

    def scores(self, request: PodRequest, nodes: Iterable[str] | None = None) -> dict[str, Score]:
        """The policy's score of every fitting node, as a key: higher is better (a tuple
        compared element by element: a policy may rank by a second criterion)."""
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.scores(request, nodes)
        names, verdicts = self.cache.verdicts(request, nodes)
        if self.vendors.scorers:
            out = {n: v[1] for n, v in zip(names, verdicts, strict=True) if v[0]}
            if not out:
                return out
            blended = self.vendors.blend(request, out, self._order)
            return {n: (v,) for n, v in blended.items()}
        return by_name(names, verdicts, self.ranker.keys_by_verdict(request, names, verdicts))

    def prioritize(
        self, request: PodRequest, nodes: Iterable[str] | None = None
    ) -> dict[str, float]:
        """Scores of the fitting nodes scaled to [0, 100] (``ranking.scale``); others are
        left out."""
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
        does not fit or is unknown): what /prioritize answers with, read per node through
        its verdict's identity instead of a dict by name looked up again name by name."""
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.prioritize_each(request, names)
        if self.vendors.scorers:
            by_node = scale(self.scores(request, names))
            return list(map(by_node.get, names))
        names, verdicts = self._recalled(request, names)
        scaled = scale(self.ranker.keys_by_verdict(request, names, verdicts))
        return list(map(scaled.get, map(id, verdicts)))

    def _recalled(self, request: PodRequest, names: list[str]) -> tuple[list[str], list[Verdict]]:
        """*names*' verdicts: those /filter remembered for them, else read from the cache."""
        verdicts = self.cache.recall(request, names)
        if verdicts is None:
            return self.cache.verdicts(request, names)
        return names, verdicts

    def prioritize_array(self, request: PodRequest, names: list[str]) -> FloatArray:
        """:meth:`prioritize_each` as an array, -1 where it gives ``None``: for a caller that
        ranks many nodes (/filter's shortlist), without a Python step per node where the
        verdicts are shared (``Ranker.scaled_array``)."""
        if request.policy is not None and (other := self.for_request(request)) is not self:
            return other.prioritize_array(request, names)
        import numpy  # imported at start off the loop (scheduler/preload.py)

        if self.vendors.scorers:
            each = self.prioritize_each(request, names)
            return numpy.array([-1.0 if s is None else s for s in each], dtype=numpy.float64)
        return self.ranker.scaled_array(request, *self._recalled(request, names))

    # -- the choice ------------------------------------------------------------------------------

    def select(self, request: PodRequest, nodes: Iterable[str] | None = None) -> str | None:
        """The best node for the pod among *nodes* (``None`` if it fits none)."""
        self.observe(request)
        placer = self.for_request(request)
        if placer.vendors.scorers or nodes is not None:
            return placer.ranker.pick_best(placer.scores(request, nodes).items())
        return placer.ranker.choose(request, placer.cache.top(request))

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
        if self._policy_places and not (request.vendors & self.vendors.custom.keys()):
            fit = self.policy.place(state, request)
        if fit is None:
            custom = self.vendors.fitters(request)
            fit = fit_pod(state, request, self._order, custom=custom)
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
        score = self.verdict(state, request)[1] if state is not None else LOWEST
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
            ok = unknown_verdict(request)[0]
            return NodeFit(node=node, fits=ok, reason="" if ok else UNKNOWN_NODE)
        host = host_reject(state, request)
        if host is not None:
            return NodeFit(node=node, fits=False, reason=host.value)
        fitters = self.vendors.fitters(request) or {}
        results, reason = walk_containers(state, request, self._order, fitters)
        fits = all(r.fits for r in results)
        score = 0.0
        if fits:
            ok, value, _ = self.cache.verdict(state, request)
            if ok:
                score = value[0]
                # The policy may choose other devices than the plain walk above: show those.
                assignment = self.decide(request, node)
                results = [
                    r.model_copy(update={"devices": c.devices})
                    for r, c in zip(results, assignment.containers, strict=False)
                ]
        return NodeFit(node=node, fits=fits, containers=tuple(results), score=score, reason=reason)


__all__ = [
    "UNKNOWN_NODE",
    "Decision",
    "FilterResult",
    "NoFit",
    "Placer",
    "policy_registry",
    "vendor_fit_applies",
]

"""What a placement policy is, and the registry that finds one by name.

A policy answers two questions for a pod that fits a node: how good that node is (a score,
higher is better, compared across the nodes that fit) and in which order to try the node's
devices. The placement engine does the fitting; a policy never needs to re-check
feasibility. Policies are registered by name through the ``xpushare_register_policies`` hook,
the core's own included, so a third party adds one the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xpushare.scheduling.fit import PodFit
    from xpushare.scheduling.ledger import UsageLedger
    from xpushare.scheduling.request import Demand, PodRequest
    from xpushare.scheduling.state import DeviceState, DeviceTable, NodeState
    from xpushare.scheduling.workload import Workload


class Policy:
    """Base class of placement policies; subclasses override :meth:`score`.

    ``cacheable``: the score of a node depends only on that node and the request (not on
    other nodes or time), so the engine may remember it until the node changes.
    """

    name = "policy"
    description = ""
    cacheable = True
    #: The score depends only on the node's state (device tables, free CPU, free memory:
    #: :meth:`NodeState.state_id`) and the request, not on its name, labels or position, so
    #: the engine may give nodes in the same state the same answer. Off unless declared.
    state_pure = False
    #: Changes whenever the policy's scores change for the same node state (e.g. a new
    #: workload): the engine keys what it remembers by it.
    generation = 0
    #: :meth:`score_many` also tells, by the core's default fit, where a pod of one device
    #: demand does not fit (it answers ``None`` there): the engine then passes it the nodes
    #: with the pod's CPU and memory without checking their devices first, and checks only
    #: the ``None`` ones, to say why. Off unless declared.
    fits_in_score = False
    #: Failures to refresh a model the policy learns (e.g. its workload); the policy logs
    #: each, keeps deciding with the model it had and tries again later.
    model_errors = 0
    #: Called with (policy name, exception) on each such failure, e.g. to count it in a
    #: metric; set by whoever runs the policy (the scheduler does), ``None``: only logged.
    on_model_error: Callable[[str, BaseException], None] | None = None

    def score(self, node: NodeState, request: PodRequest) -> float | tuple[float, ...]:
        """How much *request* should go to *node* (it fits there); higher is better.

        A tuple ranks lexicographically: later elements only break ties of earlier ones.
        Criteria that only break ties are better returned by :meth:`tiebreak`, which the
        engine calls only for the nodes tied at the top.
        """
        raise NotImplementedError

    def score_many(
        self, nodes: Sequence[NodeState], request: PodRequest
    ) -> list[float | tuple[float, ...] | None]:
        """:meth:`score` of each of *nodes* (all fit *request*), in one call.

        The engine calls this with the nodes it has no remembered answer for (one node per
        distinct state when the policy is :attr:`state_pure`), so a policy that measures
        many nodes faster together (on arrays) can; the default scores one by one. With
        :attr:`fits_in_score`, *nodes* may include nodes the pod does not fit: ``None``.
        """
        return [self.score(node, request) for node in nodes]

    def tiebreak(self, node: NodeState, request: PodRequest) -> tuple[float, ...]:
        """Further criteria (higher is better) among nodes with the best :meth:`score`.

        Called only for nodes tied at the top; the default has none.
        """
        return ()

    def device_order(
        self, node: NodeState, table: DeviceTable, demand: Demand
    ) -> Sequence[DeviceState] | None:
        """Devices of *table* in the order to try them for *demand* (``None``: as listed)."""
        return None

    def place(self, node: NodeState, request: PodRequest) -> PodFit | None:
        """The policy's own choice of devices on *node*, where it made one while scoring.

        ``None`` (the default): the engine fits the pod walking :meth:`device_order`.
        """
        return None

    def observe(self, request: PodRequest) -> None:
        """Called once per pod the engine places; policies that learn the workload use it."""

    def set_workload(self, workload: Workload) -> None:
        """The task shapes to expect and their frequencies; policies that use them keep it."""

    def attach(self, ledger: UsageLedger) -> None:
        """The ledger the engine places against (its fleet); policies that weigh the fleet
        as a whole (not only the node scored) keep it. Called by every :class:`Placer
        <xpushare.placement.Placer>` built on the policy."""

    def __repr__(self) -> str:
        return f"<policy {self.name}>"


#: What ``register`` accepts: a Policy subclass, or any callable that takes keyword options
#: and returns a Policy, or a ready Policy instance (then it takes no options).
PolicyFactory = Callable[..., Policy]


class PolicyRegistry:
    """Policies by name, each built on demand with its options."""

    def __init__(self) -> None:
        self._factories: dict[str, PolicyFactory] = {}
        self._owners: dict[str, str] = {}

    def register(self, name: str, policy: Any, *, owner: str = "") -> None:
        """Add a policy; a name registered twice is an error naming both registrants."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a policy name must be a non-empty string, got {name!r}")
        if name in self._factories:
            raise ValueError(
                f"policy {name!r} is registered twice (by {self._owners[name] or 'the core'}"
                f" and by {owner or 'the core'}); rename one of them"
            )
        if isinstance(policy, Policy):
            instance = policy

            def factory(**options: Any) -> Policy:
                if options:
                    raise ValueError(f"policy {name!r} takes no options, got {sorted(options)}")
                return instance

        elif callable(policy):
            factory = policy
        else:
            raise TypeError(
                f"policy {name!r} must be a Policy, a Policy subclass or a factory, "
                f"got {type(policy).__name__}"
            )
        self._factories[name] = factory
        self._owners[name] = owner

    def names(self) -> list[str]:
        return sorted(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def create(self, name: str, options: Mapping[str, Any] | None = None) -> Policy:
        """A policy instance; ``ValueError`` lists the known names when *name* is unknown."""
        factory = self._factories.get(name)
        if factory is None:
            known = ", ".join(self.names()) or "none"
            raise ValueError(f"unknown placement policy {name!r}; known policies: {known}")
        try:
            policy = factory(**dict(options or {}))
        except TypeError as exc:
            raise ValueError(f"policy {name!r}: bad options {dict(options or {})}: {exc}") from exc
        if not isinstance(policy, Policy):
            raise TypeError(f"policy {name!r}: the factory returned {type(policy).__name__}")
        return policy

    def update(self, entries: Iterable[tuple[str, Any]], owner: str = "") -> None:
        for name, policy in entries:
            self.register(name, policy, owner=owner)

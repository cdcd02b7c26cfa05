"""The placers of pods' own policy choices (HAMi's per-pod policy annotations).

A pod may name another node policy, GPU policy or device-score weights than the cluster's
(:class:`~xpushare.scheduling.podpolicy.PodPolicy`). Each distinct choice is decided by a
placer of its own, built on first need and kept, so a pod's choice costs what a new pod
shape does, once, and the fleet's answers for it are remembered like the cluster's.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from xpushare.scheduling import PolicyRegistry, builtin_policies
from xpushare.scheduling.podpolicy import BINPACK, SPREAD, HamiDeviceOrder

if TYPE_CHECKING:
    from xpushare.placement.config import PlacementConfig
    from xpushare.plugins import PluginHost
    from xpushare.scheduling import Policy
    from xpushare.scheduling.fit import DeviceOrder
    from xpushare.scheduling.podpolicy import PodPolicy

log = logging.getLogger(__name__)

#: Distinct per-pod policy choices (HAMi's policy annotations) a placer keeps a placer for.
#: A choice is a few names and three weights, and a cluster uses a handful; weights make
#: the space unbounded, so past the bound the placers are dropped and built again on need
#: (their answers age out of the node memos like any other).
MAX_POD_POLICIES = 64

#: The placer type (generic, so this module needs no import of the placer's).
P = TypeVar("P")


def policy_registry(host: PluginHost | None = None) -> PolicyRegistry:
    """Every policy: the core's, and those plugins contribute through the hook."""
    registry = PolicyRegistry()
    if host is None:
        registry.update(builtin_policies(), owner="xpushare")
    else:
        host.call_register_policies(registry.register)
    return registry


class Variants(Generic[P]):
    """The placers of the pod policy choices one placer has met.

    ``build(policy, device_order, choice)`` makes the placer of *choice*; ``policy`` is
    the owner's (the cluster's) policy, kept with every policy a choice named, so each
    learns the workload from every pod (:attr:`policies`).
    """

    def __init__(
        self,
        policy: Policy,
        config: PlacementConfig,
        host: PluginHost | None,
        registry: PolicyRegistry | None,
        build: Callable[[Policy, DeviceOrder | None, PodPolicy], P],
    ) -> None:
        self.policy = policy
        self.config = config
        self.host = host
        self.registry = registry
        self.policies: dict[str, Policy] = {policy.name: policy}
        self.placers: dict[PodPolicy, P] = {}
        self._build = build

    def placer(self, owner: P, owner_choice: PodPolicy | None, choice: PodPolicy) -> P:
        """The placer of *choice*: *owner* when it decides alike, else one built and kept."""
        found = self.placers.get(choice)
        if found is not None:
            return found
        if len(self.placers) >= MAX_POD_POLICIES:
            self.placers.clear()
        normal = self._known(choice)
        found = self.placers.get(normal)
        if found is None:
            if owner_choice is None and self._same_as_owner(normal):
                found = owner
            else:
                found = self.placers[normal] = self._variant(normal)
        self.placers[choice] = found
        return found

    def _registry(self) -> PolicyRegistry:
        registry = self.registry = self.registry or policy_registry(self.host)
        return registry

    def _known(self, choice: PodPolicy) -> PodPolicy:
        """*choice* with a node policy no one registered read as binpack, as HAMi reads it
        (so names nobody knows share one placer)."""
        name = choice.node
        if name is None or name in self.policies:
            return choice
        if name in self._registry():
            return choice
        log.warning("a pod's node policy %r is not a registered policy: binpack, as HAMi", name)
        return dataclasses.replace(choice, node=BINPACK)

    def _same_as_owner(self, choice: PodPolicy) -> bool:
        """Whether *choice* decides as the owner does (it names the cluster's policy)."""
        return (
            choice.device is None
            and choice.weights is None
            and choice.node in (None, self.policy.name)
        )

    def _variant(self, choice: PodPolicy) -> P:
        """The placer of *choice* (its node policy registered)."""
        name = choice.node
        policy = self.policy if name is None else self.policies.get(name)
        if policy is None and name is not None:
            options = self.config.policy_options if name == self.config.policy else {}
            policy = self.policies[name] = self._registry().create(name, options)
            policy.on_model_error = self.policy.on_model_error
        assert policy is not None  # the cluster's, or one just made
        order: DeviceOrder | None = None
        if choice.device is not None or choice.weights is not None:
            # Weights alone sort by HAMi's device score under the cluster's device policy,
            # or HAMi's default GPU policy (spread) when none is configured.
            default = self.config.device_policy or SPREAD
            order = HamiDeviceOrder(choice.device or default, choice.weights)
        return self._build(policy, order, choice)


__all__ = ["MAX_POD_POLICIES", "Variants", "policy_registry"]

"""The placement engine: one decision path for the scheduler extender and the simulator.

Why a layer above the plugins: a decision combines the vendors' hooks (request parsing, a
vendor's own fit or score) with the pure algorithms of :mod:`xpushare.scheduling` (ledger,
default fit, policies). The extender calls :meth:`Placer.filter`, :meth:`Placer.prioritize`,
:meth:`Placer.decide` and reserves in the ledger; the simulator calls the same methods, so a
policy measured offline is the policy the cluster runs.
"""

from xpushare.placement.config import PlacementConfig
from xpushare.placement.placer import Placer
from xpushare.placement.requests import host_requests, pod_request
from xpushare.placement.results import UNKNOWN_NODE, Decision, FilterResult, NoFit
from xpushare.placement.variants import policy_registry

__all__ = [
    "UNKNOWN_NODE",
    "Decision",
    "FilterResult",
    "NoFit",
    "PlacementConfig",
    "Placer",
    "host_requests",
    "pod_request",
    "policy_registry",
]

"""The scheduling core: pure algorithms, no plugin host, no I/O.

Why a layer of its own: the extender and the simulator must decide the same way, and the
decision must be fast and testable without Kubernetes. This package holds the usage ledger
(what is allocated where, kept up to date incrementally), the default fit (the sharing model
of GPU-like vendors), the placement policies and the fragmentation measure. The placement
engine (:mod:`xpushare.placement`) combines them with the vendor plugins.
"""

from xpushare.scheduling.charges import Charge, PodEntry, charges_of
from xpushare.scheduling.fit import (
    PodFit,
    fit_demand,
    fit_pod,
    host_reject,
    quick_reject,
    summarize,
)
from xpushare.scheduling.fragmentation import (
    FragmentationMeter,
    FragmentationPolicy,
    TaskShape,
    Workload,
)
from xpushare.scheduling.hookfit import default_fit
from xpushare.scheduling.ledger import UsageLedger
from xpushare.scheduling.policies import BestFitPolicy, BinpackPolicy, SpreadPolicy
from xpushare.scheduling.policy import Policy, PolicyRegistry
from xpushare.scheduling.registry import DEFAULT_POLICY, builtin_policies
from xpushare.scheduling.request import Demand, PodRequest
from xpushare.scheduling.state import UNITS, DeviceState, DeviceTable, NodeState

__all__ = [
    "DEFAULT_POLICY",
    "UNITS",
    "BestFitPolicy",
    "BinpackPolicy",
    "Charge",
    "Demand",
    "DeviceState",
    "DeviceTable",
    "FragmentationMeter",
    "FragmentationPolicy",
    "NodeState",
    "PodEntry",
    "PodFit",
    "PodRequest",
    "Policy",
    "PolicyRegistry",
    "SpreadPolicy",
    "TaskShape",
    "UsageLedger",
    "Workload",
    "builtin_policies",
    "charges_of",
    "default_fit",
    "fit_demand",
    "fit_pod",
    "host_reject",
    "quick_reject",
    "summarize",
]

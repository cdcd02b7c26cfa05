"""``xpushare scheduler``: the kube-scheduler extender and the admission webhook (DESIGN.md §1).

Modules: ``config`` (settings), ``kube`` (API access), ``informer`` and ``cluster`` (the
watched state feeding the usage ledger), ``extender`` (/filter, /prioritize, /bind),
``handoff`` (the per-node handoff of DESIGN.md §6), ``webhook`` (admission), ``leader``
(Lease election), ``events``, ``metrics`` and ``app`` (the process that wires them).
"""

from xpushare.scheduler.app import Scheduler
from xpushare.scheduler.config import ConfigError, SchedulerConfig, load_config

__all__ = ["ConfigError", "Scheduler", "SchedulerConfig", "load_config"]

"""The read-only web view of the fleet, served by ``xpushare scheduler`` on its own port.

Why inside the scheduler: the view shows the scheduler's own in-memory state (the cluster
state, the usage ledger, the placer), the numbers the placement decides by, so it can never
disagree with them. It only reads: the scheduler never imports it (an import-linter
contract), and the what-if and Pending explanations are asked without side effects
(docs/web-view.md).
"""

from xpushare.scheduler.web.server import WebView

__all__ = ["WebView"]

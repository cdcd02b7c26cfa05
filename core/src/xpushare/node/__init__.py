"""The node agent (``xpushare node``): one process per node, run as a DaemonSet.

It detects each active vendor's devices on that vendor's library thread, publishes them as
the node's inventory annotations and labels, serves one kubelet device plugin per vendor
resource (Allocate finds the pod through the handoff written at bind), turns vendor health
events into device health, and serves monitor snapshots as Prometheus metrics. See
docs/node-agent.md.
"""

from xpushare.node.agent import NodeAgent
from xpushare.node.config import NodeConfig
from xpushare.node.kube import KubeClient, KubeConflict, KubeError, NodeKube
from xpushare.node.tasks import TaskFailed, TaskGroup

__all__ = [
    "KubeClient",
    "KubeConflict",
    "KubeError",
    "NodeAgent",
    "NodeConfig",
    "NodeKube",
    "TaskFailed",
    "TaskGroup",
]

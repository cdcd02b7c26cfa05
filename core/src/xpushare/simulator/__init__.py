"""The simulator: replay a workload against a simulated fleet with the real placement engine.

Why it exists: placement policies are judged by how much of a fleet they can fill before
fragmentation turns tasks away, and that can only be measured by replaying many tasks. It
reads the openb trace (the FGD paper's, ATC'23) and our own fleet/workload files, follows the
paper's protocol, and drives :class:`xpushare.placement.Placer` exactly as the extender does.
"""

from xpushare.simulator.engine import RunResult, Simulation
from xpushare.simulator.protocol import DEFAULT_INFLATION, DEFAULT_SEED, arrivals
from xpushare.simulator.trace import NodeSpec, TaskSpec, TraceError, read_nodes, read_tasks

__all__ = [
    "DEFAULT_INFLATION",
    "DEFAULT_SEED",
    "NodeSpec",
    "RunResult",
    "Simulation",
    "TaskSpec",
    "TraceError",
    "arrivals",
    "read_nodes",
    "read_tasks",
]

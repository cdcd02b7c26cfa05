"""Per-node facts /filter reads for its candidates, in arrays: one row per node.

Why: /filter is asked about 500 candidate nodes a call (kube-scheduler's sample at 5,000
nodes), and answering them one Python step at a time (find the node, check its CPU and
memory, read its device table's state id, look the answer up) costs about 2 µs a node, a
millisecond a call: a third of a filter worker's time a pod in ``bench_throughput``. Here
those facts live in numpy arrays kept in step with the ledger (it records which nodes
changed, :meth:`UsageLedger.track_changes`; a pod's bind changes one or two), so a call is a
name-to-row lookup at C speed, a few array operations, and one Python step per *distinct*
answer instead of per node.

A row holds the node's free CPU and host memory (kube-scheduler's NodeResourcesFit, as
:func:`~xpushare.scheduling.host_reject` reads them) and, per vendor asked about, its device
table's state id (:meth:`DeviceTable.state_id`): nodes with equal ids have the same answer
for any request the checker shares answers for (scheduler/feasible.py says which).
"""

from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from xpushare.scheduling import NodeState, UsageLedger

#: A row's vendor state id when the node has no device of that vendor.
NO_TABLE = -1
#: A row's vendor state id when the vendor's own fit decides on the node's devices: the node
#: is asked one by one (``xpushare_fit_applies``).
VENDOR_FIT = -2
#: The state id of a name the ledger does not know (or a row of a node removed since).
UNKNOWN = -3
#: Free CPU or memory of a node whose allocatable is not known: never short.
UNBOUNDED = 2**62


class CandidateRows:
    """Rows of per-node facts for the nodes of one :class:`UsageLedger`."""

    def __init__(self, ledger: UsageLedger) -> None:
        import numpy

        self.np: Any = numpy
        self.ledger = ledger
        ledger.track_changes()
        self.rows: dict[str, int] = {}
        self.states: list[NodeState | None] = []
        self.cpu_free = numpy.zeros(0, dtype=numpy.int64)
        self.memory_free = numpy.zeros(0, dtype=numpy.int64)
        #: Per vendor: each row's table state id, or one of the negative markers above.
        self.sids: dict[str, np.ndarray[Any, Any]] = {}
        #: Vendors whose own fit may take some tables, and how to ask whether it does.
        self.vendor_fit: dict[str, Any] = {}
        self._grow(0)  # the spare last row, before any node

    def _grow(self, size: int) -> None:
        """Room for *size* rows and one more: the last row is never a node's, so its
        markers (UNKNOWN) answer the lookup's -1, which numpy reads as the last row."""
        np = self.np
        capacity = max(size + 1, 2 * len(self.cpu_free), 1024)
        pad = capacity - len(self.cpu_free)
        self.cpu_free = np.concatenate([self.cpu_free, np.zeros(pad, dtype=np.int64)])
        self.memory_free = np.concatenate([self.memory_free, np.zeros(pad, dtype=np.int64)])
        for vendor, sids in self.sids.items():
            self.sids[vendor] = np.concatenate([sids, np.full(pad, UNKNOWN, dtype=np.int64)])

    def _sid(self, vendor: str, state: NodeState) -> int:
        table = state.tables.get(vendor)
        if table is None:
            return NO_TABLE
        applies = self.vendor_fit.get(vendor)
        if applies is not None and applies(state.name, table):
            return VENDOR_FIT
        return table.state_id()

    def _write(self, row: int, state: NodeState | None) -> None:
        self.states[row] = state
        if state is None:
            for sids in self.sids.values():
                sids[row] = UNKNOWN
            return
        cpu, memory = state.cpu_free, state.memory_free
        self.cpu_free[row] = UNBOUNDED if cpu is None else cpu
        self.memory_free[row] = UNBOUNDED if memory is None else memory
        for vendor, sids in self.sids.items():
            sids[row] = self._sid(vendor, state)

    def sync(self) -> None:
        """Rewrite the rows of the nodes that changed since the last call."""
        changed = self.ledger.take_changes()
        if not changed:
            return
        nodes = self.ledger.nodes
        for name in changed:
            state = nodes.get(name)
            row = self.rows.get(name)
            if row is None:
                if state is None:
                    continue
                row = self.rows[name] = len(self.states)
                self.states.append(None)
                if row + 1 >= len(self.cpu_free):
                    self._grow(row + 1)
            self._write(row, state)

    def vendor(self, vendor: str) -> np.ndarray[Any, Any]:
        """Every row's state id for *vendor* (built on first use)."""
        sids = self.sids.get(vendor)
        if sids is None:
            np = self.np
            sids = np.full(len(self.cpu_free), UNKNOWN, dtype=np.int64)
            for row, state in enumerate(self.states):
                if state is not None:
                    sids[row] = self._sid(vendor, state)
            self.sids[vendor] = sids
        return sids

    def lookup(self, names: list[str]) -> np.ndarray[Any, Any]:
        """The row of each name (-1: a name no row has; as an index, the spare last row,
        whose state ids are all UNKNOWN)."""
        found: np.ndarray[Any, Any] = self.np.fromiter(
            map(self.rows.get, names, repeat(-1)), dtype=self.np.int64, count=len(names)
        )
        return found

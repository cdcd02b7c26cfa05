"""The usage ledger: what is allocated on every node and device, kept up to date in place.

It is the single source of device usage for the extender and the simulator (DESIGN.md §7):
node inventories come in from the node agents' annotations, pod assignments from pod watch
events (and from the extender's own decisions, as reservations, so two concurrent pods can
never get the same slice). Adding or removing a pod touches only the devices it uses and the
summaries of their tables; nothing is ever rebuilt per decision. ``recount`` rebuilds the
whole state from scratch, for tests and self-checks.

Its parts: what a pod books per device and booking it (charges.py), the clock and log of
node changes and the answers a changed node starts with (changes.py), the checks of what is
booked (audit.py), and the questions asked of it (ledgerview.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xpushare.models import Device, PodAssignment
from xpushare.models._compact import compact
from xpushare.scheduling.changes import CHANGE_LOG as CHANGE_LOG
from xpushare.scheduling.changes import MAX_SHARED_STATES as MAX_SHARED_STATES
from xpushare.scheduling.changes import NodeChanges
from xpushare.scheduling.charges import Charge as Charge
from xpushare.scheduling.charges import PodEntry as PodEntry
from xpushare.scheduling.charges import book
from xpushare.scheduling.charges import charges_of as charges_of
from xpushare.scheduling.ledgerview import LedgerView
from xpushare.scheduling.state import MAX_MEMO_ENTRIES, DeviceState, DeviceTable, NodeState

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping


class UsageLedger(LedgerView):
    """Nodes, their devices, and every pod's usage of them, updated incrementally.

    ``memory_overcommit`` and ``compute_overcommit`` give, per vendor name, how far device
    memory and compute may be over-booked (HAMi's ``deviceMemoryScaling`` and
    ``deviceCoreScaling``, hami-protocol.md §3.8); the key ``"*"`` sets the default.
    ``memo_limit`` bounds the answers the placement engine keeps per node and per node state
    (:data:`~xpushare.scheduling.state.MAX_MEMO_ENTRIES`).
    """

    def __init__(
        self,
        *,
        memory_overcommit: Mapping[str, float] | None = None,
        compute_overcommit: Mapping[str, float] | None = None,
        memo_limit: int = MAX_MEMO_ENTRIES,
    ) -> None:
        super().__init__(
            memory_overcommit=memory_overcommit,
            compute_overcommit=compute_overcommit,
            memo_limit=memo_limit,
        )
        self._changes = NodeChanges()
        self._next_index = 0
        #: Told of every reservation made (the key and its entry) and dropped (the key and
        #: ``None``); the scheduler's filter workers mirror them (scheduler/workers.py).
        self.on_reservation: Callable[[str, PodEntry | None], None] | None = None

    # -- inventory ---------------------------------------------------------------------------

    def set_node(
        self,
        name: str,
        devices: Iterable[Device] = (),
        *,
        cpu_milli: int | None = None,
        memory_mib: int | None = None,
        labels: Mapping[str, str] | None = None,
        cordoned: Collection[str] = (),
    ) -> NodeState:
        """Register or replace a node's inventory; its pods' usage is counted again on it.

        ``cordoned``: ids of devices taken out of new allocations (HAMi's
        ``hami.io/device-cordon``): unhealthy to every fit, the vendors' included, while
        the pods already on them stay counted.

        ``cpu_milli`` and ``memory_mib`` are the node's allocatable host resources (``None``:
        not checked here, e.g. because kube-scheduler checks them itself). Costs O(devices +
        pods on the node).
        """
        by_vendor: dict[str, list[Device]] = {}
        for device in devices:
            if device.id in cordoned and device.healthy:
                device = device.model_copy(update={"healthy": False})
            by_vendor.setdefault(device.vendor, []).append(device)
        state = self._nodes.get(name)
        if state is None:
            state = NodeState(name, self._next_index, memo_limit=self.memo_limit)
            self._next_index += 1
            self._nodes[name] = state
        state.cpu_alloc = cpu_milli
        state.memory_alloc = memory_mib
        state.labels = dict(labels or {})
        # Kept for the node's life: compacted (models/_compact.py, ~600 bytes a device).
        self._inventory[name] = {v: tuple(map(compact, ds)) for v, ds in by_vendor.items()}
        state.core_mark = None  # new tables: the vendors' fits are asked again
        state.tables = {
            vendor: DeviceTable(
                vendor,
                [
                    DeviceState.from_device(
                        d,
                        self.memory_overcommit(vendor),
                        self.compute_overcommit(vendor),
                        cordoned=d.id in cordoned,
                    )
                    for d in ds
                ],
            )
            for vendor, ds in by_vendor.items()
        }
        state.orphans = {}
        state.cpu_used = 0
        state.memory_used = 0
        for key in sorted(state.pods):
            self._apply(state, self._entries[key], +1, refresh=False)
        for table in state.tables.values():
            table.refresh()
        self._bump(state)
        return state

    def remove_node(self, name: str) -> None:
        """Forget a node's inventory; its pods stay and count again if it comes back."""
        state = self._nodes.get(name)
        if state is None:
            return
        if state.pods:
            # Keep a bare placeholder that still holds the pods' usage as orphans.
            self.set_node(name, ())
        else:
            del self._nodes[name]
            self._changes.removed(name)
        self._inventory.pop(name, None)

    def track_changes(self) -> None:
        """Start recording which nodes change (every node known now counts as changed), for
        one reader that keeps per-node facts of its own (scheduler/candidates.py)."""
        self._changes.track(self._nodes)

    def take_changes(self) -> set[str]:
        """The nodes added, changed or removed since the last call (and forget them)."""
        return self._changes.take()

    # -- pods ----------------------------------------------------------------------------------

    def add(
        self,
        key: str,
        assignment: PodAssignment | None,
        *,
        node: str | None = None,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        reserved: bool = False,
        namespace: str = "",
    ) -> PodEntry:
        """Count a pod's usage (replacing what was counted for *key* before).

        *assignment* ``None`` records a pod without devices (host resources only) on *node*.
        *namespace*: whose quota the usage counts against. Costs O(devices of the pod).
        """
        if assignment is not None:
            node = assignment.node
            compact(assignment)  # kept for the pod's life
        if node is None:
            raise ValueError(f"pod {key}: an entry without an assignment needs a node name")
        if key in self._entries:
            self.remove(key)
        entry = PodEntry(
            key=key,
            node=node,
            assignment=assignment,
            charges=charges_of(assignment) if assignment is not None else (),
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            reserved=reserved,
            namespace=namespace,
        )
        state = self._nodes.get(node)
        if state is None:
            # A pod seen before its node's inventory: hold its usage until the node comes.
            state = NodeState(node, self._next_index)
            self._next_index += 1
            self._nodes[node] = state
        self._entries[key] = entry
        state.pods.add(key)
        self._apply(state, entry, +1)
        self._namespaces.count(entry, +1)
        return entry

    def remove(self, key: str) -> bool:
        """Stop counting a pod; ``False`` if it was not counted. O(devices of the pod)."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        state = self._nodes[entry.node]
        state.pods.discard(key)
        self._apply(state, entry, -1)
        self._namespaces.count(entry, -1)
        if not state.pods and entry.node not in self._inventory:
            # The last pod of a placeholder node (no inventory): the node is gone, recorded
            # as remove_node records it, not only through the bump of the pod's removal.
            del self._nodes[entry.node]
            self._changes.removed(entry.node)
        return True

    def reserve(
        self,
        key: str,
        assignment: PodAssignment,
        *,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        namespace: str = "",
    ) -> PodEntry:
        """Count a decision not yet bound: it is used from now on, until released or bound."""
        entry = self.add(
            key,
            assignment,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            reserved=True,
            namespace=namespace,
        )
        if self.on_reservation is not None:
            self.on_reservation(key, entry)
        return entry

    def release(self, key: str) -> bool:
        """Drop a reservation (the bind failed or was abandoned); a bound pod stays."""
        entry = self._entries.get(key)
        if entry is None or not entry.reserved:
            return False
        self.remove(key)
        if self.on_reservation is not None:
            self.on_reservation(key, None)
        return True

    def confirm(self, key: str) -> bool:
        """A reservation became a bound pod; its usage does not change."""
        entry = self._entries.get(key)
        if entry is None:
            return False
        entry.reserved = False
        return True

    # -- internals -----------------------------------------------------------------------------

    def _apply(self, state: NodeState, entry: PodEntry, sign: int, *, refresh: bool = True) -> None:
        touched = book(state, entry, sign)
        if refresh:
            for table in touched:
                table.refresh()
            self._changes.bump(state)

    def _bump(self, state: NodeState) -> None:
        self._changes.bump(state)

    @property
    def clock(self) -> int:
        """A count of node changes: it moves on every change to any node's answers."""
        return self._changes.clock

    def changed_since(self, clock: int) -> set[str] | None:
        """The names of the nodes added, changed or removed since :attr:`clock` read
        *clock*; ``None`` when more changed than the log keeps (ask everything again)."""
        return self._changes.changed_since(clock)

    # -- whole-state views (tests, self-checks, `xpushare fit`) --------------------------------

    def recount(self) -> dict[str, Any]:
        """The snapshot of a ledger rebuilt from scratch from the inventories and entries."""
        fresh = UsageLedger(
            memory_overcommit=self._memory_oc,
            compute_overcommit=self._compute_oc,
            memo_limit=self.memo_limit,
        )
        for name, state in self._nodes.items():
            if name in self._inventory:
                fresh.set_node(
                    name,
                    self.devices(name),
                    cpu_milli=state.cpu_alloc,
                    memory_mib=state.memory_alloc,
                    labels=state.labels,
                    cordoned={d.id for t in state.tables.values() for d in t.devices if d.cordoned},
                )
        for entry in self._entries.values():
            fresh.add(
                entry.key,
                entry.assignment,
                node=entry.node,
                cpu_milli=entry.cpu_milli,
                memory_mib=entry.memory_mib,
                reserved=entry.reserved,
                namespace=entry.namespace,
            )
        return fresh.snapshot()

"""The usage ledger: what is allocated on every node and device, kept up to date in place.

It is the single source of device usage for the extender and the simulator (DESIGN.md §7):
node inventories come in from the node agents' annotations, pod assignments from pod watch
events (and from the extender's own decisions, as reservations, so two concurrent pods can
never get the same slice). Adding or removing a pod touches only the devices it uses and the
summaries of their tables; nothing is ever rebuilt per decision. ``recount`` rebuilds the
whole state from scratch, for tests and self-checks.

A pod's usage of a device is collapsed as in HAMi (hami-protocol.md §1.8): init containers
run before the app containers and one at a time, so a device costs the larger of the
largest init container and the sum of the app containers; a share slot is taken per app
container on it (one if only init containers use it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from xpushare.models import Device, DeviceUsage, NodeView, PodAssignment
from xpushare.models._compact import compact
from xpushare.scheduling.state import MAX_MEMO_ENTRIES, DeviceState, DeviceTable, NodeState

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

#: Node states whose shared answers the ledger keeps (each a dict of at most ``memo_limit``
#: answers, mostly pointers to answers shared further: at the scheduler's 64, some 40 MB at
#: the bound): a simulator replay passes through some 10,000, a cluster's extender through
#: fewer at a time.
MAX_SHARED_STATES = 20_000
#: Node changes the ledger remembers by name (:meth:`UsageLedger.changed_since`). A reader
#: patches answers it took a moment ago (/filter's, reused by the /prioritize that follows
#: it, some milliseconds later): at 300 pods/s about four changes land in between (a
#: reservation and three watch events a pod), so 256 leaves room for a burst of node
#: updates; past it the reader asks everything again.
CHANGE_LOG = 256


@dataclass(frozen=True, slots=True)
class Charge:
    """What one pod books on one device."""

    vendor: str
    device_id: str
    slots: int
    memory: int
    compute: int
    exclusive: bool
    partitions: tuple[str, ...] = ()


@dataclass(slots=True)
class PodEntry:
    """One pod in the ledger: its node, its charges, its host resources."""

    key: str
    node: str
    assignment: PodAssignment | None
    charges: tuple[Charge, ...]
    cpu_milli: int
    memory_mib: int
    reserved: bool
    #: The pod's namespace ("" when unknown): its usage counts against the namespace's quota.
    namespace: str = ""


def charges_of(assignment: PodAssignment) -> tuple[Charge, ...]:
    """The collapsed per-device usage of a pod's assignment (init peak vs app sum)."""
    app: dict[tuple[str, str], list[Any]] = {}
    init: dict[tuple[str, str], list[Any]] = {}
    for container in assignment.containers:
        target = init if container.init else app
        for s in container.devices:
            e = target.setdefault((container.vendor, s.device_id), [0, 0, 0, False, []])
            if container.init:
                e[0] = 1
                e[1] = max(e[1], s.memory_mib)
                e[2] = max(e[2], s.compute_percent)
            else:
                e[0] += 1
                e[1] += s.memory_mib
                e[2] += s.compute_percent
            e[3] = e[3] or s.exclusive
            if s.partition:
                e[4].append(s.partition)
    out = []
    for key in sorted(set(app) | set(init)):
        a = app.get(key)
        i = init.get(key)
        if a is None:
            assert i is not None
            slots, memory, compute, exclusive, parts = i
        else:
            slots, memory, compute = a[0], a[1], a[2]
            exclusive, parts = a[3], a[4]
            if i is not None:
                memory = max(memory, i[1])
                compute = max(compute, i[2])
                exclusive = exclusive or i[3]
        out.append(Charge(key[0], key[1], slots, memory, compute, exclusive, tuple(sorted(parts))))
    return tuple(out)


class UsageLedger:
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
        if memo_limit < 1:
            raise ValueError(f"memo_limit must be at least 1, got {memo_limit}")
        #: Answers each node keeps per state (``NodeState.memo_limit``).
        self.memo_limit = memo_limit
        self._memory_oc = dict(memory_overcommit or {})
        self._compute_oc = dict(compute_overcommit or {})
        for name, factors in (("memory", self._memory_oc), ("compute", self._compute_oc)):
            for vendor, factor in factors.items():
                if not factor > 0:
                    raise ValueError(
                        f"{name} over-commit for vendor {vendor!r} must be > 0, got {factor}"
                    )
        self._nodes: dict[str, NodeState] = {}
        self._inventory: dict[str, dict[str, tuple[Device, ...]]] = {}
        self._entries: dict[str, PodEntry] = {}
        #: Per namespace and vendor: [device memory MiB, compute percent] its pods book
        #: (reservations included), kept with every add and remove: what quotas compare to.
        self._namespaces: dict[str, dict[str, list[int]]] = {}
        self._clock = 0
        #: The nodes of the last CHANGE_LOG clock ticks, one name per tick (see
        #: :meth:`changed_since`).
        self._log: deque[str] = deque(maxlen=CHANGE_LOG)
        self._next_index = 0
        self._shared: dict[int, dict[Any, Any]] = {}
        #: Told of every reservation made (the key and its entry) and dropped (the key and
        #: ``None``); the scheduler's filter workers mirror them (scheduler/workers.py).
        self.on_reservation: Callable[[str, PodEntry | None], None] | None = None
        #: Names of the nodes changed since :meth:`take_changes` was last called; ``None``
        #: until :meth:`track_changes` (bounded by the fleet: a set of node names).
        self._changed: set[str] | None = None

    # -- configuration ----------------------------------------------------------------------

    def memory_overcommit(self, vendor: str) -> float:
        return self._memory_oc.get(vendor, self._memory_oc.get("*", 1.0))

    def compute_overcommit(self, vendor: str) -> float:
        return self._compute_oc.get(vendor, self._compute_oc.get("*", 1.0))

    # -- queries ----------------------------------------------------------------------------

    @property
    def nodes(self) -> Mapping[str, NodeState]:
        return self._nodes

    def node(self, name: str) -> NodeState | None:
        return self._nodes.get(name)

    def entry(self, key: str) -> PodEntry | None:
        return self._entries.get(key)

    def entries(self) -> Iterator[PodEntry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def namespace_usage(self, namespace: str) -> Mapping[str, tuple[int, int]]:
        """Per vendor, the (device memory MiB, compute percent) *namespace*'s pods book."""
        return {v: (u[0], u[1]) for v, u in self._namespaces.get(namespace, {}).items()}

    def namespaces(self) -> list[str]:
        """The namespaces whose pods book devices now."""
        return sorted(self._namespaces)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def devices(self, node: str, vendor: str | None = None) -> tuple[Device, ...]:
        """The inventory of *node* (of one vendor, or all)."""
        inv = self._inventory.get(node, {})
        if vendor is not None:
            return inv.get(vendor, ())
        return tuple(d for devices in inv.values() for d in devices)

    def node_view(self, node: str, vendor: str) -> NodeView:
        """The node as a vendor's scheduler-side hooks see it: that vendor's devices only."""
        state = self._nodes.get(node)
        return NodeView(
            name=node,
            devices=self.devices(node, vendor),
            labels=dict(state.labels) if state else {},
        )

    def device_usage(self, node: str, vendor: str) -> dict[str, DeviceUsage]:
        """Allocated share per device id of *vendor* on *node*, as hooks receive it."""
        state = self._nodes.get(node)
        if state is None:
            return {}
        table = state.tables.get(vendor)
        out = {d.id: d.to_usage() for d in table.devices} if table else {}
        for (v, device_id), o in state.orphans.items():
            if v == vendor and device_id not in out:
                out[device_id] = DeviceUsage(
                    device_id=device_id,
                    used_slots=o[0],
                    used_memory_mib=o[1],
                    used_compute_percent=o[2],
                    exclusive=o[3] > 0,
                )
        return out

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
            if self._changed is not None:
                self._changed.add(name)
            self._tick(name)
        self._inventory.pop(name, None)

    def track_changes(self) -> None:
        """Start recording which nodes change (every node known now counts as changed), for
        one reader that keeps per-node facts of its own (scheduler/candidates.py)."""
        self._changed = set(self._nodes)

    def take_changes(self) -> set[str]:
        """The nodes added, changed or removed since the last call (and forget them)."""
        changed = self._changed
        if changed is None:
            raise RuntimeError("UsageLedger.take_changes before track_changes")
        self._changed = set()
        return changed

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
        self._count_namespace(entry, +1)
        return entry

    def _count_namespace(self, entry: PodEntry, sign: int) -> None:
        if not entry.charges:
            return
        vendors = self._namespaces.setdefault(entry.namespace, {})
        for c in entry.charges:
            used = vendors.setdefault(c.vendor, [0, 0])
            used[0] += sign * c.memory
            used[1] += sign * c.compute
            if used == [0, 0]:
                del vendors[c.vendor]
        if not vendors:
            del self._namespaces[entry.namespace]

    def remove(self, key: str) -> bool:
        """Stop counting a pod; ``False`` if it was not counted. O(devices of the pod)."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        state = self._nodes[entry.node]
        state.pods.discard(key)
        self._apply(state, entry, -1)
        self._count_namespace(entry, -1)
        if not state.pods and entry.node not in self._inventory:
            del self._nodes[entry.node]
            self._tick(entry.node)
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

    def overbooked(self, node: str, key: str | None = None) -> list[str]:
        """What is booked past capacity on *node*'s devices (on those pod *key* holds, when
        given); empty when all is within capacity. Sentences naming each device.

        The bind path asks this after it re-read a node's pods: a decision taken before
        another replica's last Binding reached us must not be committed on top of it. Fault
        tests ask it of a ledger rebuilt from the API server's annotations.
        """
        state = self._nodes.get(node)
        if state is None:
            return []
        if key is None:
            picked = [(v, d) for v, t in state.tables.items() for d in t.devices]
        else:
            entry = self._entries.get(key)
            if entry is None:
                return []
            picked = []
            for c in entry.charges:
                table = state.tables.get(c.vendor)
                d = table.by_id.get(c.device_id) if table is not None else None
                if d is not None:
                    picked.append((c.vendor, d))
        problems = []
        for vendor, d in picked:
            what = f"{vendor} device {d.id} of node {node}"
            if d.used_memory > d.memory_cap:
                problems.append(f"{what}: {d.used_memory} of {d.memory_cap} MiB booked")
            if d.used_compute > d.compute_cap:
                problems.append(f"{what}: {d.used_compute} of {d.compute_cap} % compute booked")
            if d.used_slots > d.slots or (d.exclusive and d.used_slots > 1):
                problems.append(f"{what}: {d.used_slots} of {d.slots} share slots booked")
            for name, used in d.partitions_used.items():
                if name in d.partitions and used > d.partitions[name][2]:
                    problems.append(f"{what}: {used} {name} instances booked")
        return problems

    # -- internals -----------------------------------------------------------------------------

    def _apply(self, state: NodeState, entry: PodEntry, sign: int, *, refresh: bool = True) -> None:
        state.cpu_used += sign * entry.cpu_milli
        state.memory_used += sign * entry.memory_mib
        touched: list[DeviceTable] = []
        for c in entry.charges:
            table = state.tables.get(c.vendor)
            d = table.by_id.get(c.device_id) if table is not None else None
            if d is None or table is None:
                o = state.orphans.setdefault((c.vendor, c.device_id), [0, 0, 0, 0])
                o[0] += sign * c.slots
                o[1] += sign * c.memory
                o[2] += sign * c.compute
                o[3] += sign * (1 if c.exclusive else 0)
                if not any(o):
                    del state.orphans[(c.vendor, c.device_id)]
                continue
            d.sig = None
            d.used_slots += sign * c.slots
            d.used_memory += sign * c.memory
            d.used_compute += sign * c.compute
            if c.exclusive:
                d.exclusive += sign
            for p in c.partitions:
                d.partitions_used[p] += sign
                if d.partitions_used[p] <= 0:
                    del d.partitions_used[p]
            if table not in touched:
                touched.append(table)
        if refresh:
            for table in touched:
                table.refresh()
            self._bump(state)

    @property
    def clock(self) -> int:
        """A count of node changes: it moves on every change to any node's answers."""
        return self._clock

    def changed_since(self, clock: int) -> set[str] | None:
        """The names of the nodes added, changed or removed since :attr:`clock` read
        *clock*; ``None`` when more changed than the log keeps (ask everything again)."""
        ticks = self._clock - clock
        if ticks <= 0:
            return set()
        if ticks > len(self._log):
            return None
        return set(islice(reversed(self._log), ticks))

    def _tick(self, name: str) -> None:
        self._clock += 1
        self._log.append(name)

    def _bump(self, state: NodeState) -> None:
        if self._changed is not None:
            self._changed.add(state.name)
        self._tick(state.name)
        state.version = self._clock
        state.memo = {}
        state.state_key = None
        state.shared = self._shared_answers(state.state_id())

    def _shared_answers(self, state_id: int) -> dict[Any, Any]:
        """The answers every node in state *state_id* shares (``NodeState.shared``).

        State ids are never reused, so a dict stays right for its state; past the bound the
        table is emptied and nodes entering a state afterwards start a new dict for it.
        """
        found = self._shared.get(state_id)
        if found is None:
            if len(self._shared) >= MAX_SHARED_STATES:
                self._shared.clear()
            found = self._shared[state_id] = {}
        return found

    # -- whole-state views (tests, self-checks, `xpushare fit`) --------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything counted, as plain data: equal for equal states."""
        out: dict[str, Any] = {}
        for name, state in sorted(self._nodes.items()):
            devices = {
                (vendor, d.id): d.usage_key()
                for vendor, table in state.tables.items()
                for d in table.devices
            }
            summaries = {
                vendor: (
                    t.n_healthy,
                    t.n_usable,
                    t.n_whole_free,
                    t.max_free_memory,
                    t.max_free_compute,
                    t.slots_used,
                    t.mem_used,
                    t.compute_used,
                    t.units_free,
                )
                for vendor, t in state.tables.items()
            }
            out[name] = {
                "cpu_used": state.cpu_used,
                "memory_used": state.memory_used,
                "devices": devices,
                "summaries": summaries,
                "orphans": {k: tuple(v) for k, v in sorted(state.orphans.items())},
                "pods": sorted(state.pods),
            }
        return out

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

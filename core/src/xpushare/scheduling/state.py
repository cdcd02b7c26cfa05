"""The scheduler's working state of nodes and devices, in plain mutable objects.

Why not the pydantic models: ``/filter`` and the simulator look at every candidate node for
every pod (10 million node evaluations for one replay of the openb trace), and building or
copying a frozen model costs microseconds each. These slotted objects hold the same facts
(:class:`~xpushare.models.Device` for the inventory, :class:`~xpushare.models.DeviceUsage`
for what is allocated), are changed in place by the usage ledger only, and carry per-table
summaries so most nodes are accepted or rejected without looking at their devices.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xpushare.models import Device, DeviceUsage
from xpushare.scheduling.partitions import Occupancy, geometry_of
from xpushare.scheduling.signatures import (
    SIG_COMPUTE_CAP,
    SIG_FREE_COMPUTE,
    SIG_FREE_MEMORY,
    SIG_GEOMETRY,
    SIG_MEMORY,
    SIG_MODEL,
    SIG_OCCUPANCY,
    SIG_UNITS,
    SIG_USABLE,
    SIG_WHOLE,
    UNITS,
    booked_partition_signature,
    booked_signature,
    intern_signature,
    partition_units,
    units_left,
)

if TYPE_CHECKING:
    from xpushare.scheduling.partitions import Geometry


@dataclass(slots=True, eq=False)
class DeviceState:
    """One device: its inventory facts and what is allocated on it now."""

    id: str
    index: int
    model: str
    model_key: str  # upper-cased model, for case-insensitive include/exclude matching
    numa: int | None
    healthy: bool
    memory_mib: int  # physical memory: percent requests resolve against it
    memory_cap: int  # memory that may be booked: physical x memory over-commit
    compute_cap: int  # compute percent that may be booked: 100 x compute over-commit
    slots: int
    partitions: dict[str, tuple[int, int, int]]  # profile -> (memory, compute, max count)
    used_slots: int = 0
    used_memory: int = 0
    used_compute: int = 0
    exclusive: int = 0  # number of containers holding the device exclusively
    partitions_used: Counter[str] = field(default_factory=Counter)
    sig: tuple[Any, ...] | None = None  # cached device_signature; None after a change
    #: Taken out of new allocations by the node's ``hami.io/device-cordon`` (then also
    #: unhealthy, so every summary leaves it out); kept to say why.
    cordoned: bool = False
    #: The partition geometry of a device whose instances are created per container
    #: (dynamic MIG: profiles with placements), else ``None``. Its instances in use are the
    #: ``"<profile>@<start>"`` names of ``partitions_used``.
    geometry: Geometry | None = None

    @classmethod
    def from_device(
        cls,
        device: Device,
        memory_overcommit: float = 1.0,
        compute_overcommit: float = 1.0,
        *,
        cordoned: bool = False,
    ) -> DeviceState:
        return cls(
            id=device.id,
            index=device.index,
            model=device.model,
            model_key=device.model.upper(),
            numa=device.numa_node,
            healthy=device.healthy and not cordoned,
            memory_mib=device.memory_mib,
            memory_cap=int(device.memory_mib * memory_overcommit),
            compute_cap=int(100 * compute_overcommit),
            slots=device.share_slots,
            partitions={
                p.name: (p.memory_mib, p.compute_percent, p.max_count) for p in device.partitions
            },
            cordoned=cordoned,
            geometry=geometry_of(device.partitions) if device.partitions else None,
        )

    @property
    def usable(self) -> bool:
        """Whether a new container could be put here at all (health, exclusivity, slots)."""
        return self.healthy and not self.exclusive and self.used_slots < self.slots

    def occupancy(self) -> Occupancy:
        """What the instances in use take of a partitioned device (:attr:`geometry`)."""
        assert self.geometry is not None
        return self.geometry.occupancy(self.partitions_used.elements())

    def free_units(self) -> int:
        """Free capacity in thousandths of the device: the scarcer of memory and compute.

        An unhealthy device has none (it is not capacity); a device whose share slots are all
        taken or that is held exclusively keeps its leftover, which nobody can use: that is
        exactly what the fragmentation measure counts. A partitioned device (dynamic MIG)
        counts its compute slices that no instance takes (:func:`partition_units`).
        """
        if not self.healthy:
            return 0
        if self.geometry is not None:
            return partition_units(self.geometry, self.occupancy())
        return units_left(
            self.memory_cap,
            self.memory_cap - self.used_memory,
            self.compute_cap,
            self.compute_cap - self.used_compute,
        )

    def to_usage(self) -> DeviceUsage:
        parts: list[str] = []
        for name, n in sorted(self.partitions_used.items()):
            parts.extend([name] * n)
        return DeviceUsage(
            device_id=self.id,
            used_slots=self.used_slots,
            used_memory_mib=self.used_memory,
            used_compute_percent=self.used_compute,
            exclusive=self.exclusive > 0,
            partitions_in_use=tuple(parts),
        )

    def usage_key(self) -> tuple[int, int, int, int, tuple[tuple[str, int], ...]]:
        return (
            self.used_slots,
            self.used_memory,
            self.used_compute,
            self.exclusive,
            tuple(sorted((k, v) for k, v in self.partitions_used.items() if v)),
        )


class DeviceTable:
    """The devices of one vendor on one node, with summaries for O(1) accept/reject.

    The summaries are recomputed by :meth:`refresh` after every change (O(devices)); the
    usage ledger is the only writer.
    """

    __slots__ = (
        "by_id",
        "compute_cap_total",
        "compute_used",
        "devices",
        "kind_counts",
        "max_free_compute",
        "max_free_memory",
        "mem_cap_total",
        "mem_used",
        "n_cordoned",
        "n_healthy",
        "n_held",
        "n_usable",
        "n_whole_free",
        "sig_id",
        "signature",
        "sizes",
        "slots_total",
        "slots_used",
        "uniform_memory",
        "uniform_sizes",
        "units_free",
        "units_total",
        "vendor",
        "vendor_fit",
    )

    def __init__(self, vendor: str, devices: list[DeviceState]) -> None:
        self.vendor = vendor
        self.devices = sorted(devices, key=lambda d: (d.index, d.id))
        self.by_id = {d.id: d for d in self.devices}
        #: Devices cordoned (fixed for the table's life: a cordon change builds a new one).
        self.n_cordoned = sum(d.cordoned for d in self.devices)
        memories = {d.memory_mib for d in self.devices}
        #: Physical memory of every device when they all have the same, else ``None``: lets a
        #: percent request be checked against the summary without a device scan.
        self.uniform_memory: int | None = memories.pop() if len(memories) == 1 else None
        #: Every device has the same physical memory and capacities, so a demand takes the
        #: same units on each (the fragmentation arrays rely on it).
        self.uniform_sizes = (
            len({(d.memory_mib, d.memory_cap, d.compute_cap) for d in self.devices}) <= 1
        )
        first = self.devices[0] if self.devices else None
        #: The first device's (physical MiB, memory capacity, compute capacity): the size a
        #: whole-table estimate of a demand's units is taken at.
        self.sizes: tuple[int, int, int] = (
            (first.memory_mib, first.memory_cap, first.compute_cap) if first else (0, 0, 0)
        )
        self.n_healthy = 0
        self.n_held = 0
        self.n_usable = 0
        self.n_whole_free = 0
        self.max_free_memory = 0
        self.max_free_compute = 0
        self.slots_total = 0
        self.slots_used = 0
        self.mem_cap_total = 0
        self.mem_used = 0
        self.compute_cap_total = 0
        self.compute_used = 0
        self.units_free = 0
        self.units_total = 0
        self.signature: tuple[Any, ...] | None = None
        self.sig_id: int | None = None
        self.kind_counts: tuple[tuple[tuple[Any, ...], int], ...] | None = None
        #: Whether the vendor's own fit may decide on these devices (its
        #: ``xpushare_fit_applies`` hook), asked once by the placement engine: ``None``
        #: until then. The ledger builds a new table when the inventory changes.
        self.vendor_fit: bool | None = None
        self.refresh()

    def refresh(self) -> None:
        """Recompute the summaries from the devices; called after every change."""
        n_healthy = n_held = n_usable = n_whole = 0
        max_mem = max_compute = 0
        slots_total = slots_used = mem_cap = mem_used = c_cap = c_used = 0
        units_free = units_total = 0
        for d in self.devices:
            slots_total += d.slots
            slots_used += d.used_slots
            mem_cap += d.memory_cap
            mem_used += d.used_memory
            c_cap += d.compute_cap
            c_used += d.used_compute
            if not d.healthy:
                continue
            n_healthy += 1
            units_total += UNITS
            units_free += d.free_units()
            if d.exclusive:
                n_held += 1
                continue
            if d.used_slots >= d.slots:
                continue
            n_usable += 1
            if d.used_slots == 0:
                n_whole += 1
            free_mem = d.memory_cap - d.used_memory
            free_compute = d.compute_cap - d.used_compute
            if free_mem > max_mem:
                max_mem = free_mem
            if free_compute > max_compute:
                max_compute = free_compute
        self.n_healthy = n_healthy
        self.n_held = n_held
        self.n_usable = n_usable
        self.n_whole_free = n_whole
        self.max_free_memory = max_mem
        self.max_free_compute = max_compute
        self.slots_total = slots_total
        self.slots_used = slots_used
        self.mem_cap_total = mem_cap
        self.mem_used = mem_used
        self.compute_cap_total = c_cap
        self.compute_used = c_used
        self.units_free = units_free
        self.units_total = units_total
        self.signature = None
        self.sig_id = None
        self.kind_counts = None
        # Now, not on the next decision: only the changed devices' signatures are computed
        # again (a few µs here), where a lazy state made the first decision after loading a
        # 5,000-node fleet compute all 40,000 (a quarter of a second).
        self.state_id()

    def kinds(self) -> tuple[tuple[tuple[Any, ...], int], ...]:
        """(signature, devices in that state) per distinct device state, signature order."""
        found = self.kind_counts
        if found is None:
            found = self.kind_counts = tuple(
                (sig, sum(1 for _ in same))
                for sig, same in itertools.groupby(self.state_signature())
            )
        return found

    def usage_share(self) -> float:
        """How full the table is in [0, 1]: mean of the slot, compute and memory shares.

        HAMi's generic node score uses the same three ratios (hami-protocol.md §3.6).
        """
        parts = []
        if self.slots_total:
            parts.append(self.slots_used / self.slots_total)
        if self.compute_cap_total:
            parts.append(self.compute_used / self.compute_cap_total)
        if self.mem_cap_total:
            parts.append(self.mem_used / self.mem_cap_total)
        return min(1.0, sum(parts) / len(parts)) if parts else 0.0

    def state_signature(self) -> tuple[Any, ...]:
        """A hashable summary equal for tables on which every request behaves the same.

        Devices are sorted, so two nodes with the same devices in the same state but in a
        different order share a signature; the fragmentation measure is memoised on it.
        """
        sig = self.signature
        if sig is None:
            sig = tuple(sorted(cached_signature(d) for d in self.devices))
            self.signature = sig
        return sig

    def state_id(self) -> int:
        """A small int standing for :meth:`state_signature`: cheap to hash in cache keys."""
        sig_id = self.sig_id
        if sig_id is None:
            sig_id = self.sig_id = intern_signature(self.state_signature())
        return sig_id


def device_signature(d: DeviceState) -> tuple[Any, ...]:
    """What decides whether a request fits one device, and how much of it is free.

    (model, physical MiB, free MiB, free compute, entirely free, usable, free units,
    memory capacity, compute capacity, NUMA node, share slots in use, share slots), and for
    a partitioned device (dynamic MIG) its geometry and the occupancy of its instances in
    use: two MIG GPUs with the same shares booked but other layouts are not alike (a 1g at
    slice 0 blocks a 4g, one at slice 6 does not). That adds no unbounded dimension: a
    geometry has finitely many layouts (an A100-80GB 1,109), and signatures live in the
    bounded stores of the measures. Other devices' signatures are as they were.
    """
    if d.geometry is not None:
        return (*_shared_signature(d), d.geometry, d.occupancy())
    return _shared_signature(d)


def _shared_signature(d: DeviceState) -> tuple[Any, ...]:
    return (
        d.model_key,
        d.memory_mib,
        d.memory_cap - d.used_memory,
        d.compute_cap - d.used_compute,
        d.used_slots == 0 and not d.exclusive,
        d.healthy and not d.exclusive and d.used_slots < d.slots,
        d.free_units(),
        d.memory_cap,
        d.compute_cap,
        -1 if d.numa is None else d.numa,
        d.used_slots,
        d.slots,
    )


def cached_signature(d: DeviceState) -> tuple[Any, ...]:
    sig = d.sig
    if sig is None:
        sig = d.sig = device_signature(d)
    return sig


#: Answers one node's memo (or one node state's shared answers) keeps by default; a full
#: memo drops its oldest answer for each new one. Per request kind a node holds two to four
#: (the engine's verdict, the policy's placement, its tie-break, /filter's feasibility), so
#: this keeps the last 8 to 16 kinds: a pod's /filter, /prioritize and /bind, and its sibling
#: pods from the same controller. At 5,000 nodes that is 160,000 answers: some 10 MB when
#: they point to answers nodes share, 50 MB at worst (one refusal per node); without a bound
#: every distinct request ever asked stayed on every node. (The simulator, which asks every
#: node about each of its trace's shapes in turn, keeps more: ``UsageLedger(memo_limit=)``.)
MAX_MEMO_ENTRIES = 32


def remember(memo: dict[Any, Any], key: Any, value: Any, limit: int = MAX_MEMO_ENTRIES) -> None:
    """``memo[key] = value``; a memo holding *limit* answers first drops its oldest.

    A dict iterates in insertion order, so the first key is the oldest: dropping it costs
    O(1), and the bound holds whatever kinds of requests arrive.
    """
    if len(memo) >= limit:
        del memo[next(iter(memo))]
    memo[key] = value


class NodeState:
    """One node: host resources and a device table per vendor.

    ``version`` changes on every change to the node, and ``memo`` is replaced with it: the
    placement engine keeps per-node answers there (fit and score of one request shape),
    which therefore never outlive the state they were computed from. Writers go through
    :func:`remember`, which bounds it (and ``shared``) to ``memo_limit`` answers.
    """

    __slots__ = (
        "core_mark",
        "cpu_alloc",
        "cpu_used",
        "index",
        "labels",
        "memo",
        "memo_limit",
        "memory_alloc",
        "memory_used",
        "name",
        "orphans",
        "pods",
        "shared",
        "state_key",
        "tables",
        "version",
    )

    def __init__(
        self,
        name: str,
        index: int,
        *,
        cpu_alloc: int | None = None,
        memory_alloc: int | None = None,
        labels: dict[str, str] | None = None,
        memo_limit: int = MAX_MEMO_ENTRIES,
    ) -> None:
        self.name = name
        #: Position in the ledger (order of registration): a stable tie-break.
        self.index = index
        self.cpu_alloc = cpu_alloc
        self.memory_alloc = memory_alloc
        self.cpu_used = 0
        self.memory_used = 0
        self.labels = labels or {}
        self.tables: dict[str, DeviceTable] = {}
        self.pods: set[str] = set()
        #: Usage charged to devices this node does not (or no longer) report, per
        #: (vendor, device id): kept so it is counted again if the device comes back.
        self.orphans: dict[tuple[str, str], list[int]] = {}
        self.version = 0
        self.memo: dict[Any, Any] = {}
        #: Answers ``memo`` and ``shared`` keep at most (see :func:`remember`).
        self.memo_limit = memo_limit
        #: Answers that depend only on the node's state (:meth:`state_id`): one dict for
        #: every node in the same state, so an answer worked out for one node is there for
        #: all of them (the ledger swaps it when the node changes).
        self.shared: dict[Any, Any] = {}
        self.state_key: int | None = None
        #: Left by the placement engine (``Placer._mark``): a marker of the set of vendors
        #: with fits of their own for which the core's fit decides on every table of this
        #: node, so the node reads its state's shared answers for them. ``None`` until
        #: asked; the ledger resets it whenever it builds the node's tables again.
        self.core_mark: object | None = None

    def remember(self, key: Any, value: Any) -> None:
        """Keep an answer in the node's own memo (bounded: :func:`remember`)."""
        remember(self.memo, key, value, self.memo_limit)

    @property
    def cpu_free(self) -> int | None:
        return None if self.cpu_alloc is None else self.cpu_alloc - self.cpu_used

    @property
    def memory_free(self) -> int | None:
        return None if self.memory_alloc is None else self.memory_alloc - self.memory_used

    def table(self, vendor: str) -> DeviceTable | None:
        return self.tables.get(vendor)

    def state_id(self) -> int:
        """An id equal for nodes in the same state: device tables, free CPU, free memory.

        Everything a placement decision reads about a node except its name, so answers
        computed for one node serve every node with the same id.
        """
        key = self.state_key
        if key is None:
            tables = tuple(sorted((v, t.state_id()) for v, t in self.tables.items()))
            key = self.state_key = intern_signature((tables, self.cpu_free, self.memory_free))
        return key


#: The signatures' names are also importable from here, where they were first defined.
__all__ = [
    "MAX_MEMO_ENTRIES",
    "SIG_COMPUTE_CAP",
    "SIG_FREE_COMPUTE",
    "SIG_FREE_MEMORY",
    "SIG_GEOMETRY",
    "SIG_MEMORY",
    "SIG_MODEL",
    "SIG_OCCUPANCY",
    "SIG_UNITS",
    "SIG_USABLE",
    "SIG_WHOLE",
    "UNITS",
    "DeviceState",
    "DeviceTable",
    "NodeState",
    "booked_partition_signature",
    "booked_signature",
    "cached_signature",
    "device_signature",
    "intern_signature",
    "partition_units",
    "remember",
    "units_left",
]

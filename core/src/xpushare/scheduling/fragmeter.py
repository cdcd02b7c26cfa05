"""The fragmentation measure of FGD: how much of a node's free device capacity the tasks
of a workload could not use (fragmentation.py's docstring gives the paper's rule, and its
reading of devices cut into partitions).

Speed: the part of the measure that depends on devices is memoised per (vendor, table
signature): nodes in the same state share it, and a fleet has few distinct states. Only the
host check (CPU and memory left against each shape's) is done per node. The batch search
(fragbatch.py) reads the same measure from arrays (fragarrays.py).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from xpushare.scheduling.fit import sig_can_host
from xpushare.scheduling.state import (
    SIG_UNITS,
    DeviceState,
    DeviceTable,
    NodeState,
    cached_signature,
    device_signature,
    intern_signature,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from xpushare.scheduling.fit import Pick
    from xpushare.scheduling.fragarrays import VendorArrays
    from xpushare.scheduling.workload import Workload

#: Table states whose vector a meter keeps. A vector holds up to one (CPU, memory, growth)
#: per task shape: ~6 KB at the learnt workload's 64 shapes, so 12 MB at the bound. Each
#: placement the policy weighs is a new state, so a stream of new request sizes fills it;
#: the openb replay meets ~3,000 and runs as fast with this bound (a refill is ~30 us).
_MAX_VECTORS = 2_048
#: Device states whose shape masks a meter keeps, some 250 bytes each: 2 MB at the bound.
#: A fleet has hundreds (the openb replay ~420), and each request of a new size adds the
#: states its booking would leave (as fragarrays.MAX_SIGNATURES).
_MAX_MASKS = 8_192

#: A device table's state (see :meth:`DeviceTable.state_signature`).
Signature = tuple[tuple[Any, ...], ...]
#: A state with its interned id (:func:`~xpushare.scheduling.state.intern_signature`).
State = tuple[int, Signature]


class _Vector:
    """The device-dependent part of a table's fragmentation for every shape."""

    __slots__ = ("fixes", "ok_sum", "total")

    def __init__(self, ok_sum: float, total: int, fixes: Sequence[tuple[int, int, float]]) -> None:
        #: Fragmentation when the node has CPU and memory for every shape.
        self.ok_sum = ok_sum
        #: Free units of the table.
        self.total = total
        #: (cpu, memory, extra): add *extra* when the node lacks that CPU or memory.
        self.fixes = fixes


class FragmentationMeter:
    """Measures fragmentation for one workload, memoised per device-table state.

    Table states are passed as :data:`State`: (interned id, signature); caches are keyed
    by the id, since hashing a signature costs more than the lookup it serves.
    """

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self._vectors: dict[tuple[str, int], _Vector] = {}
        #: One object per distinct fix: states share most of them (a shape's CPU and memory
        #: are the workload's, its stuck capacity takes few values), so a vector holds
        #: pointers, not tuples of its own (2,048 vectors were ~12 MB as tuples each).
        self._fix_pool: dict[tuple[int, int, float], tuple[int, int, float]] = {}
        self._masks: dict[tuple[str, tuple[Any, ...]], int] = {}
        self._arrays: dict[str, VendorArrays] = {}

    def arrays(self, vendor: str) -> VendorArrays:
        """The measure's rows for *vendor* on arrays, for the batch search."""
        found = self._arrays.get(vendor)
        if found is None:
            from xpushare.scheduling.fragarrays import VendorArrays  # numpy: see BATCH_MIN

            found = self._arrays[vendor] = VendorArrays(self.workload, vendor, self.host_mask)
        return found

    def host_mask(self, vendor: str, device: tuple[Any, ...]) -> int:
        """Bit i set when a device in state *device* could hold one part of shape i."""
        key = (vendor, device)
        mask = self._masks.get(key)
        if mask is None:
            mask = 0
            for i, shape in enumerate(self.workload.shapes):
                demand = shape.demand
                if demand is not None and shape.vendor == vendor and sig_can_host(device, demand):
                    mask |= 1 << i
            if len(self._masks) >= _MAX_MASKS:
                self._masks.clear()
            self._masks[key] = mask
        return mask

    def groups(self, vendor: str, sig: Signature) -> list[tuple[int, int, int]]:
        """(shape mask, devices, free units of each) per distinct device state of *sig*."""
        out: list[tuple[int, int, int]] = []
        for device, same in itertools.groupby(sig):
            out.append((self.host_mask(vendor, device), len(list(same)), device[SIG_UNITS]))
        return out

    def vector(self, vendor: str, state: State) -> _Vector:
        key = (vendor, state[0])
        vec = self._vectors.get(key)
        if vec is not None:
            return vec
        groups = self.groups(vendor, state[1])
        total = sum(n * units for _, n, units in groups)
        ok_sum = 0.0
        fixes: list[tuple[int, int, float]] = []
        for i, (shape, w) in enumerate(zip(self.workload.shapes, self.workload.raw, strict=True)):
            demand = shape.demand
            if demand is None or shape.vendor != vendor:
                ok_sum += w * total
                continue
            usable = 0
            stuck = 0
            bit = 1 << i
            for mask, n, units in groups:
                if mask & bit:
                    usable += n
                else:
                    stuck += n * units
            if usable < demand.count:
                ok_sum += w * total
                continue
            ok_sum += w * stuck
            if (shape.cpu_milli or shape.memory_mib) and total > stuck:
                fix = (shape.cpu_milli, shape.memory_mib, w * (total - stuck))
                fixes.append(self._fix_pool.setdefault(fix, fix))
        vec = _Vector(ok_sum, total, tuple(fixes))
        if len(self._vectors) >= _MAX_VECTORS:
            self._vectors.clear()
            self._fix_pool.clear()  # vectors kept elsewhere stay valid
        self._vectors[key] = vec
        return vec

    def table_raw(
        self, vendor: str, state: State, cpu_free: int | None, memory_free: int | None
    ) -> float:
        """A table's fragmentation times the workload's scale (an integer for counted
        weights, so sums of these are exact in any order)."""
        vec = self.vector(vendor, state)
        frag = vec.ok_sum
        if vec.fixes and (
            (cpu_free is not None and cpu_free < self.workload.max_cpu)
            or (memory_free is not None and memory_free < self.workload.max_memory)
        ):
            for cpu, memory, extra in vec.fixes:
                if (cpu_free is not None and cpu > cpu_free) or (
                    memory_free is not None and memory > memory_free
                ):
                    frag += extra
        return frag

    def node_frag(self, node: NodeState) -> float:
        """Fragmentation of *node* now, in units (thousandths of a device)."""
        cpu, mem = node.cpu_free, node.memory_free
        raw = sum(
            self.table_raw(vendor, table_state(table), cpu, mem)
            for vendor, table in node.tables.items()
        )
        return raw / self.workload.scale

    def frag_after_sigs(
        self,
        node: NodeState,
        after: Mapping[str, State],
        cpu_milli: int,
        memory_mib: int,
    ) -> float:
        """Fragmentation of *node* with its tables in the states *after* (by vendor; the
        others as they are) and *cpu_milli*, *memory_mib* more taken."""
        cpu = None if node.cpu_free is None else node.cpu_free - cpu_milli
        mem = None if node.memory_free is None else node.memory_free - memory_mib
        raw = sum(
            self.table_raw(vendor, after.get(vendor) or table_state(table), cpu, mem)
            for vendor, table in node.tables.items()
        )
        return raw / self.workload.scale

    def frag_after(
        self,
        node: NodeState,
        picks: Sequence[tuple[DeviceTable, Sequence[Pick]]],
        cpu_milli: int,
        memory_mib: int,
    ) -> float:
        """Fragmentation of *node* if *picks* were booked and the host resources taken."""
        after = {t.vendor: sig_after(t, p) for t, p in picks}
        return self.frag_after_sigs(node, after, cpu_milli, memory_mib)


def table_state(table: DeviceTable) -> State:
    return (table.state_id(), table.state_signature())


def sig_after(table: DeviceTable, picks: Sequence[Pick]) -> State:
    """The state *table* would be in with *picks* booked (the table is left as it was)."""
    touched: dict[int, DeviceState] = {}
    for d, memory, compute, exclusive, partition in picks:
        d.used_slots += 1
        d.used_memory += memory
        d.used_compute += compute
        d.exclusive += 1 if exclusive else 0
        if partition is not None and d.geometry is not None:
            d.partitions_used[partition] += 1
        touched[id(d)] = d
    try:
        new = {key: device_signature(d) for key, d in touched.items()}
    finally:
        for d, memory, compute, exclusive, partition in picks:
            d.used_slots -= 1
            d.used_memory -= memory
            d.used_compute -= compute
            d.exclusive -= 1 if exclusive else 0
            if partition is not None and d.geometry is not None:
                d.partitions_used[partition] -= 1
                if d.partitions_used[partition] <= 0:
                    del d.partitions_used[partition]
    sig = tuple(sorted(new.get(id(d)) or cached_signature(d) for d in table.devices))
    return (intern_signature(sig), sig)


__all__ = ["FragmentationMeter", "Signature", "State", "sig_after", "table_state"]

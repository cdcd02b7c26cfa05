"""What a pod books on each device, and booking it on a node's working state.

A pod's usage of a device is collapsed as in HAMi (hami-protocol.md §1.8): init containers
run before the app containers and one at a time, so a device costs the larger of the
largest init container and the sum of the app containers; a share slot is taken per app
container on it (one if only init containers use it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xpushare.models import PodAssignment
    from xpushare.scheduling.state import DeviceTable, NodeState


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


def book(state: NodeState, entry: PodEntry, sign: int) -> list[DeviceTable]:
    """Count (*sign* +1) or uncount (-1) *entry* on *state*: its host resources, and each
    charge on its device, or as an orphan when the node has no such device (a pod seen
    before its node's inventory, or after a device left). The tables touched, whose
    summaries the caller refreshes."""
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
    return touched


class NamespaceBook:
    """Per namespace and vendor: the device memory (MiB) and compute (percent) its pods
    book, reservations included, kept with every add and remove: what quotas compare to."""

    def __init__(self) -> None:
        self._namespaces: dict[str, dict[str, list[int]]] = {}

    def count(self, entry: PodEntry, sign: int) -> None:
        """Count (*sign* +1) or uncount (-1) *entry*'s charges against its namespace."""
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

    def usage(self, namespace: str) -> dict[str, tuple[int, int]]:
        """Per vendor, the (device memory MiB, compute percent) *namespace*'s pods book."""
        return {v: (u[0], u[1]) for v, u in self._namespaces.get(namespace, {}).items()}

    def names(self) -> list[str]:
        """The namespaces whose pods book devices now."""
        return sorted(self._namespaces)


__all__ = ["Charge", "NamespaceBook", "PodEntry", "book", "charges_of"]

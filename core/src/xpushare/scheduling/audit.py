"""Checks of the ledger's counts: what is booked past capacity, and the whole state as plain
data (equal for equal states), for the bind path's last check, tests and self-checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from xpushare.scheduling.charges import PodEntry
    from xpushare.scheduling.state import DeviceState, NodeState


def overbooked(node: str, state: NodeState, entry: PodEntry | None) -> list[str]:
    """What is booked past capacity on *state*'s devices (on those *entry* holds, when
    given); empty when all is within capacity. Sentences naming each device."""
    picked: list[tuple[str, DeviceState]]
    if entry is None:
        picked = [(v, d) for v, t in state.tables.items() for d in t.devices]
    else:
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


def snapshot(nodes: Mapping[str, NodeState]) -> dict[str, Any]:
    """Everything counted on *nodes*, as plain data: equal for equal states."""
    out: dict[str, Any] = {}
    for name, state in sorted(nodes.items()):
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


__all__ = ["overbooked", "snapshot"]

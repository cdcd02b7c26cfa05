"""The default fit as the vendor hooks see it: pydantic in, pydantic out (vendors whose own
fit falls back to the core's, ``xpushare fit``, the CLI). The engine itself works on the
ledger's device tables (fit.py); this builds such a table from a node view and its usage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpushare.models import FitReason, FitResult
from xpushare.scheduling.devicefit import slices
from xpushare.scheduling.fit import fit_demand, summarize
from xpushare.scheduling.request import Demand
from xpushare.scheduling.state import DeviceState, DeviceTable

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from xpushare.models import ContainerRequest, DeviceUsage, NodeView


def table_from_view(
    vendor: str,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    memory_overcommit: float = 1.0,
    compute_overcommit: float = 1.0,
) -> DeviceTable:
    """A device table for *vendor*'s devices of *node*, with *usage* applied."""
    states = []
    for device in node.devices:
        if device.vendor != vendor:
            continue
        d = DeviceState.from_device(device, memory_overcommit, compute_overcommit)
        u = usage.get(device.id)
        if u is not None:
            d.used_slots = u.used_slots
            d.used_memory = u.used_memory_mib
            d.used_compute = u.used_compute_percent
            d.exclusive = 1 if u.exclusive else 0
            d.partitions_used.update(u.partitions_in_use)
        states.append(d)
    return DeviceTable(vendor, states)


def ordered(table: DeviceTable, device_order: Sequence[str]) -> list[DeviceState]:
    """The table's devices in *device_order* (ids), unknown ids ignored, the rest after."""
    seen: set[str] = set()
    out: list[DeviceState] = []
    for device_id in device_order:
        d = table.by_id.get(device_id)
        if d is not None and device_id not in seen:
            seen.add(device_id)
            out.append(d)
    out.extend(d for d in table.devices if d.id not in seen)
    return out


def default_fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str] = (),
    memory_overcommit: float = 1.0,
    compute_overcommit: float = 1.0,
) -> FitResult:
    """The core's answer to ``xpushare_fit``: does *request* fit *node* given *usage*.

    Every device is examined, so ``reasons`` explains the whole node even when it fits.
    """
    table = table_from_view(request.vendor, node, usage, memory_overcommit, compute_overcommit)
    demand = Demand(request)
    if not table.devices:
        return FitResult(
            fits=False,
            reasons={FitReason.NO_DEVICES: 1},
            message=f"node {node.name} has no {request.vendor} devices",
        )
    picks, reasons = fit_demand(table, demand, ordered(table, device_order), full=True)
    if picks is None:
        return FitResult(
            fits=False,
            reasons=dict(reasons),
            message=summarize(reasons, len(table.devices), demand),
        )
    return FitResult(fits=True, devices=slices(picks), reasons=dict(reasons))


__all__ = ["default_fit", "ordered", "table_from_view"]

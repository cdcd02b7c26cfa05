"""How much of a device a demand takes, in thousandths of a device.

Scoring and fragmentation compare capacity on one scale across vendors and request forms
(MiB, percent of memory, percent of compute): a demand takes the larger of its memory share
and its compute share of the device, rounded up, and an exclusive demand takes all of a
device that is not over-committed (on one that is, it books its compute like any share).
For the openb trace, where a task asks the same share of memory and compute, this is exactly
the trace's ``gpu_milli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpushare.scheduling.state import UNITS, DeviceTable

if TYPE_CHECKING:
    from xpushare.scheduling.request import Demand


def demand_units(demand: Demand, memory_mib: int, memory_cap: int, compute_cap: int) -> int:
    """Units of one device (of the given sizes) that one part of *demand* takes."""
    if demand.exclusive_on(compute_cap):
        return UNITS
    units = 0
    if memory_cap > 0:
        need = demand.memory_for(memory_mib)
        units = -(-UNITS * need // memory_cap)
    if compute_cap > 0:
        units = max(units, -(-UNITS * demand.compute // compute_cap))
    return min(UNITS, units)


def table_demand_units(table: DeviceTable, demand: Demand) -> int:
    """Units *demand* takes on *table*, all parts together (its first device's sizes)."""
    if not table.devices:
        return 0
    d = table.devices[0]
    return demand.count * demand_units(demand, d.memory_mib, d.memory_cap, d.compute_cap)

"""Moore Threads health: volatile uncorrected DRAM ECC errors make a GPU unhealthy
(gpustack-devices.md §2.2, as for NVIDIA)."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.mthreads.detect import device, memory, uncorrected_ecc
from xpushare_others.mthreads.library import Mtml


def check(mtml: Mtml, devices: Sequence[Device]) -> list[HealthEvent]:
    events: list[HealthEvent] = []
    for d in devices:
        with device(mtml, d.index) as dev, memory(mtml, dev) as mem:
            errors = uncorrected_ecc(mtml, mem)
        if errors is None:
            continue
        healthy = errors == 0
        if healthy != d.healthy:
            reason = "no ECC errors any more" if healthy else f"{errors} uncorrected DRAM ECC"
            events.append(HealthEvent(device_id=d.id, healthy=healthy, reason=reason))
    return events

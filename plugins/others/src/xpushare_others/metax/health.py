"""MetaX health: uncorrectable DRAM ECC errors make a GPU unhealthy (gpustack-devices.md §2.2)."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.metax.library import Mxsml


def check(mxsml: Mxsml, devices: Sequence[Device]) -> list[HealthEvent]:
    events: list[HealthEvent] = []
    for d in devices:
        ue = mxsml.dram_ue(d.index)
        if ue is None:
            continue
        healthy = ue == 0
        if healthy != d.healthy:
            reason = "no DRAM ECC errors any more" if healthy else f"{ue} uncorrectable DRAM ECC"
            events.append(HealthEvent(device_id=d.id, healthy=healthy, reason=reason))
    return events

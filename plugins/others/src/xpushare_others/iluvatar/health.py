"""Iluvatar health: IXML's own verdict, ``ixmlDeviceGetHealth`` other than OK
(gpustack-devices.md §2.2). The value is a bit mask of problems, reported as is."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.iluvatar.library import HEALTH_OK, Ixml


def check(ixml: Ixml, devices: Sequence[Device]) -> list[HealthEvent]:
    events: list[HealthEvent] = []
    for d in devices:
        value = ixml.health(ixml.handle(d.index), d.index)
        if value is None:
            continue
        healthy = value == HEALTH_OK
        if healthy != d.healthy:
            reason = "IXML reports the GPU healthy" if healthy else f"IXML health {value:#x}"
            events.append(HealthEvent(device_id=d.id, healthy=healthy, reason=reason))
    return events

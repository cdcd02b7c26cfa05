"""Kunlun health: an XPU XPUML reports in reset, in error or in exception is unhealthy."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.kunlun.library import Xpuml, problem


def check(xpuml: Xpuml, devices: Sequence[Device]) -> list[HealthEvent]:
    events: list[HealthEvent] = []
    for d in devices:
        why = problem(xpuml.state(d.index))
        healthy = why is None
        if healthy != d.healthy:
            reason = "XPU state is usable again" if healthy else f"XPUML reports the XPU {why}"
            events.append(HealthEvent(device_id=d.id, healthy=healthy, reason=reason))
    return events

"""Biren health: BRML's own verdict (``brmlDeviceGetHealthStatus``) of a device's GPU;
CRITICAL_WARNING and ERROR make it unhealthy, OK and WARNING healthy."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.biren import detect
from xpushare_others.biren.library import HEALTH_NAMES, Brml


def check(brml: Brml, devices: Sequence[Device]) -> list[HealthEvent]:
    events: list[HealthEvent] = []
    for d in devices:
        gpu = int(d.extra[detect.GPU])
        value = brml.health(brml.handle(gpu), f"GPU {gpu}")
        if value is None:
            continue
        healthy = detect.healthy(value)
        if healthy != d.healthy:
            name = HEALTH_NAMES.get(value, str(value))
            events.append(
                HealthEvent(device_id=d.id, healthy=healthy, reason=f"BRML health status {name}")
            )
    return events

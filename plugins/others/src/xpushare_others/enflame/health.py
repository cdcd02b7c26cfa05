"""Enflame health: a GCU EFML calls unhealthy is, and so is one EFML cannot query at all."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.enflame.library import Efml, EfmlError


def _why(efml: Efml, device: Device) -> str | None:
    try:
        healthy = efml.healthy(device.index)
    except EfmlError as exc:
        # One lost GCU must not stop the checks of the others, nor look healthy.
        return f"cannot be queried ({exc})"
    return "reports the GCU unhealthy (EfmlGetDevIsHealth)" if healthy is False else None


def check(efml: Efml, devices: Sequence[Device]) -> list[HealthEvent]:
    events: list[HealthEvent] = []
    for d in devices:
        why = _why(efml, d)
        healthy = why is None
        if healthy != d.healthy:
            reason = "EFML reports the GCU healthy again" if healthy else f"EFML {why}"
            events.append(HealthEvent(device_id=d.id, healthy=healthy, reason=reason))
    return events

"""Kunlun health: an XPU XPUML reports in reset, in error or in exception is unhealthy, and so
is one XPUML cannot query at all (e.g. ``XPUML_ERROR_XPU_IS_LOST``)."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.kunlun.library import Xpuml, XpumlError, problem


def _why(xpuml: Xpuml, device: Device) -> str | None:
    try:
        state = problem(xpuml.state(device.index))
    except XpumlError as exc:
        # One lost XPU must not stop the checks of the others, nor look healthy.
        return f"cannot be queried ({exc})"
    return f"is {state}" if state else None


def check(xpuml: Xpuml, devices: Sequence[Device]) -> list[HealthEvent]:
    events: list[HealthEvent] = []
    for d in devices:
        why = _why(xpuml, d)
        healthy = why is None
        if healthy != d.healthy:
            reason = "XPU state is usable again" if healthy else f"XPUML: the XPU {why}"
            events.append(HealthEvent(device_id=d.id, healthy=healthy, reason=reason))
    return events

"""Hygon health: a DCU with uncorrectable memory-controller ECC errors is unhealthy.

That is GPUStack's signal for AMD and Hygon (gpustack-devices.md §2.2); a DCU that does not
support ECC counting stays as detected.
"""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.hygon.library import Rsmi


def check(rsmi: Rsmi, devices: Sequence[Device]) -> list[HealthEvent]:
    events: list[HealthEvent] = []
    for d in devices:
        errors = rsmi.uncorrectable_ecc(d.index)
        if errors is None:
            continue
        healthy = errors == 0
        if healthy != d.healthy:
            reason = (
                "no uncorrectable ECC errors any more"
                if healthy
                else f"{errors} uncorrectable ECC error(s) in the memory controller (UMC)"
            )
            events.append(HealthEvent(device_id=d.id, healthy=healthy, reason=reason))
    return events

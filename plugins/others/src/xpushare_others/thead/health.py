"""T-Head health: uncorrected volatile ECC errors (``hgmlDeviceGetTotalEccErrors``) > 0 make a
PPU unhealthy, as GPUStack's T-Head detector judges it; an HGML without the call reports none."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.thead.detect import healthy
from xpushare_others.thead.library import Hgml


def check(hgml: Hgml, devices: Sequence[Device]) -> list[HealthEvent]:
    events: list[HealthEvent] = []
    for d in devices:
        ecc = hgml.uncorrected_ecc(hgml.handle(d.index), d.index)
        if ecc is None or healthy(ecc) == d.healthy:
            continue
        reason = "no uncorrected ECC errors" if healthy(ecc) else f"{ecc} uncorrected ECC errors"
        events.append(HealthEvent(device_id=d.id, healthy=healthy(ecc), reason=reason))
    return events

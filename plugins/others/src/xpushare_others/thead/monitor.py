"""T-Head monitoring: HGML's readings (bytes, percent, Celsius, milliwatts)."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, DeviceSample, MonitorSnapshot
from xpushare_others.thead.detect import MIB, healthy
from xpushare_others.thead.library import Hgml


def sample(hgml: Hgml, devices: Sequence[Device]) -> MonitorSnapshot:
    samples = []
    for d in devices:
        h = hgml.handle(d.index)
        util = hgml.utilization(h, d.index)
        temp = hgml.temperature(h, d.index)
        power = hgml.power_mw(h, d.index)
        samples.append(
            DeviceSample(
                device_id=d.id,
                utilization_percent=float(util) if util is not None else None,
                memory_used_mib=hgml.memory(h, d.index).used // MIB,
                memory_total_mib=d.memory_mib,
                temperature_c=float(temp) if temp is not None else None,
                power_w=power / 1000 if power is not None else None,
                healthy=healthy(hgml.uncorrected_ecc(h, d.index)),
            )
        )
    return MonitorSnapshot(devices=tuple(samples))

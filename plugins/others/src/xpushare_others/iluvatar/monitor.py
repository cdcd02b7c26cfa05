"""Iluvatar monitoring: NVML's readings under IXML (bytes, percent, Celsius, milliwatts)."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, DeviceSample, MonitorSnapshot
from xpushare_others.iluvatar.detect import MIB
from xpushare_others.iluvatar.library import HEALTH_OK, Ixml


def sample(ixml: Ixml, devices: Sequence[Device]) -> MonitorSnapshot:
    samples = []
    for d in devices:
        h = ixml.handle(d.index)
        util = ixml.utilization(h, d.index)
        temp = ixml.temperature(h, d.index)
        power = ixml.power_mw(h, d.index)
        health = ixml.health(h, d.index)
        samples.append(
            DeviceSample(
                device_id=d.id,
                utilization_percent=float(util) if util is not None else None,
                memory_used_mib=ixml.memory(h, d.index).used // MIB,
                memory_total_mib=d.memory_mib,
                temperature_c=float(temp) if temp is not None else None,
                power_w=power / 1000 if power is not None else None,
                healthy=d.healthy if health is None else health == HEALTH_OK,
            )
        )
    return MonitorSnapshot(devices=tuple(samples))

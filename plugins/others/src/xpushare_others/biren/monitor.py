"""Biren monitoring: BRML's readings (bytes, percent, Celsius, milliwatts); an SVI instance
reports its own memory and the utilisation, temperature and power of its GPU."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, DeviceSample, MonitorSnapshot
from xpushare_others.biren import detect
from xpushare_others.biren.library import Brml


def sample(brml: Brml, devices: Sequence[Device]) -> MonitorSnapshot:
    samples = []
    for d in devices:
        where = f"Biren device {d.id}"
        gpu = brml.handle(int(d.extra[detect.GPU]))
        own = detect.handle_of(brml, d)
        util = brml.utilization(gpu, where)
        temp = brml.temperature(gpu, where)
        power = brml.power_mw(gpu, where)
        health = brml.health(gpu, where)
        samples.append(
            DeviceSample(
                device_id=d.id,
                utilization_percent=float(util) if util is not None else None,
                memory_used_mib=brml.memory(own, where).used // detect.MIB,
                memory_total_mib=d.memory_mib,
                temperature_c=float(temp) if temp is not None else None,
                power_w=power / 1000 if power is not None else None,
                healthy=detect.healthy(health),
            )
        )
    return MonitorSnapshot(devices=tuple(samples))

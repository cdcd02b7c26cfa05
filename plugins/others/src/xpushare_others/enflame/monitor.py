"""Enflame monitoring: DTU usage (%), device memory (MiB), ASIC temperature (°C), power (W)."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, DeviceSample, MonitorSnapshot
from xpushare_others.enflame.library import Efml


def sample(efml: Efml, devices: Sequence[Device]) -> MonitorSnapshot:
    samples = []
    for d in devices:
        mem = efml.memory(d.index)
        usage = efml.usage(d.index)
        power = efml.power_w(d.index)
        samples.append(
            DeviceSample(
                device_id=d.id,
                utilization_percent=max(0.0, usage) if usage is not None else None,
                memory_used_mib=int(mem.mem_used),
                memory_total_mib=int(mem.mem_total_size),
                temperature_c=efml.temperature(d.index),
                power_w=max(0.0, power) if power is not None else None,
                healthy=efml.healthy(d.index) is not False,
            )
        )
    return MonitorSnapshot(devices=tuple(samples))

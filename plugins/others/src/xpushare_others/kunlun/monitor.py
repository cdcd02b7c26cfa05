"""Kunlun monitoring: XPU utilisation, global memory (bytes), die temperature (°C), power."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, DeviceSample, MonitorSnapshot
from xpushare_others.kunlun.detect import MIB
from xpushare_others.kunlun.library import Xpuml, problem


def sample(xpuml: Xpuml, devices: Sequence[Device]) -> MonitorSnapshot:
    samples = []
    for d in devices:
        usage = xpuml.utilization(d.index)
        power = xpuml.power_mw(d.index)
        temp = xpuml.temperature(d.index)
        samples.append(
            DeviceSample(
                device_id=d.id,
                utilization_percent=float(usage) if usage is not None else None,
                memory_used_mib=xpuml.memory(d.index).usedGlobalMemory // MIB,
                memory_total_mib=d.memory_mib,
                temperature_c=float(temp) if temp is not None else None,
                power_w=power / 1000 if power is not None else None,
                healthy=problem(xpuml.state(d.index)) is None,
            )
        )
    return MonitorSnapshot(devices=tuple(samples))

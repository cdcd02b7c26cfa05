"""Hygon monitoring: memory, busy percent, temperature and power of each DCU.

Units (rocm_smi.h): memory in bytes, temperature in millidegrees Celsius, power in
microwatts (gpustack-devices.md §2.3 converts the same way). A reading the DCU does not
support is None ("not measured"), never zero.
"""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, DeviceSample, MonitorSnapshot
from xpushare_others.hygon.detect import MIB
from xpushare_others.hygon.library import Rsmi


def sample(rsmi: Rsmi, devices: Sequence[Device]) -> MonitorSnapshot:
    samples = []
    for d in devices:
        used = rsmi.memory_used(d.index)
        temp = rsmi.temperature_mc(d.index)
        power = rsmi.power_uw(d.index)
        busy = rsmi.busy_percent(d.index)
        ecc = rsmi.uncorrectable_ecc(d.index)
        samples.append(
            DeviceSample(
                device_id=d.id,
                utilization_percent=float(busy) if busy is not None else None,
                memory_used_mib=used // MIB if used is not None else None,
                memory_total_mib=d.memory_mib,
                temperature_c=temp / 1000 if temp is not None else None,
                power_w=power / 1_000_000 if power is not None else None,
                healthy=d.healthy if ecc is None else ecc == 0,
            )
        )
    return MonitorSnapshot(devices=tuple(samples))

"""MetaX monitoring: memory (KiB), compute-core usage, hotspot temperature (1/100 °C), power."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from xpushare.models import Device, DeviceSample, MonitorSnapshot
from xpushare_others.metax.detect import KIB_PER_MIB
from xpushare_others.metax.library import Mxsml

#: MXSML reports temperatures in hundredths of a degree (MetaX's tools divide by 100).
CENTI: Final = 100


def sample(mxsml: Mxsml, devices: Sequence[Device]) -> MonitorSnapshot:
    samples = []
    for d in devices:
        usage = mxsml.usage(d.index)
        temp = mxsml.temperature(d.index)
        power = mxsml.power_mw(d.index)
        ue = mxsml.dram_ue(d.index)
        samples.append(
            DeviceSample(
                device_id=d.id,
                utilization_percent=float(usage) if usage is not None else None,
                memory_used_mib=mxsml.memory(d.index).vramUse // KIB_PER_MIB,
                memory_total_mib=d.memory_mib,
                temperature_c=temp / CENTI if temp is not None else None,
                power_w=power / 1000 if power is not None else None,
                healthy=d.healthy if ue is None else ue == 0,
            )
        )
    return MonitorSnapshot(devices=tuple(samples))

"""Moore Threads monitoring: memory (bytes), GPU utilisation, temperature, power (mW)."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, DeviceSample, MonitorSnapshot
from xpushare_others.mthreads.detect import MIB, device, memory, uncorrected_ecc
from xpushare_others.mthreads.library import Mtml, call_optional


def sample(mtml: Mtml, devices: Sequence[Device]) -> MonitorSnapshot:
    api = mtml.api
    samples = []
    for d in devices:
        with device(mtml, d.index) as dev:
            with memory(mtml, dev) as mem:
                used = int(api.mtmlMemoryGetUsed(mem))
                ecc = uncorrected_ecc(mtml, mem)
            gpu = api.mtmlDeviceInitGpu(dev)
            try:
                util = call_optional(mtml, api.mtmlGpuGetUtilization, gpu)
                temp = call_optional(mtml, api.mtmlGpuGetTemperature, gpu)
            finally:
                api.mtmlDeviceFreeGpu(gpu)
            power = call_optional(mtml, api.mtmlDeviceGetPowerUsage, dev)
        samples.append(
            DeviceSample(
                device_id=d.id,
                utilization_percent=float(util) if util is not None else None,
                memory_used_mib=used // MIB,
                memory_total_mib=d.memory_mib,
                temperature_c=float(temp) if temp is not None else None,
                power_w=power / 1000 if power is not None else None,
                healthy=d.healthy if ecc is None else ecc == 0,
            )
        )
    return MonitorSnapshot(devices=tuple(samples))

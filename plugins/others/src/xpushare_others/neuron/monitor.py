"""Neuron monitoring: device memory in use (sysfs, summed over the cores) and health.

Utilisation, temperature and power come from ``neuron-monitor`` (a streaming daemon over the
runtime), not from sysfs, so they are left unknown here.
"""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, DeviceSample, MonitorSnapshot
from xpushare_others.neuron import health, sysfs
from xpushare_others.neuron.config import NeuronConfig
from xpushare_others.neuron.detect import root

MIB = 2**20


def sample(config: NeuronConfig, devices: Sequence[Device]) -> MonitorSnapshot:
    samples = []
    for d in devices:
        path = root(config) / f"neuron{d.index}"
        used = sysfs.memory_used_bytes(path, d.compute_units or d.share_slots)
        samples.append(
            DeviceSample(
                device_id=d.id,
                memory_used_mib=used // MIB if used is not None else None,
                healthy=not health.check(config, [d.model_copy(update={"healthy": True})]),
            )
        )
    return MonitorSnapshot(devices=tuple(samples))

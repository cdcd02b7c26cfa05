"""Neuron health: a device whose sysfs directory or core count has gone (the driver dropped
it), or whose ``/dev/neuron<N>`` node is missing, is unhealthy."""

from __future__ import annotations

from collections.abc import Sequence

from xpushare.models import Device, HealthEvent
from xpushare_others.neuron import sysfs
from xpushare_others.neuron.config import MAX_CORES, NeuronConfig
from xpushare_others.neuron.detect import root


def _why(config: NeuronConfig, device: Device) -> str | None:
    if sysfs.device(device.index, root(config) / f"neuron{device.index}", MAX_CORES) is None:
        return f"the driver no longer publishes neuron{device.index} (its core_count is gone)"
    if not config.on_host(f"/dev/neuron{device.index}").exists():
        return f"/dev/neuron{device.index} is missing on the node"
    return None


def check(config: NeuronConfig, devices: Sequence[Device]) -> list[HealthEvent]:
    events: list[HealthEvent] = []
    for d in devices:
        why = _why(config, d)
        healthy = why is None
        if healthy != d.healthy:
            reason = "the Neuron driver publishes the device again" if healthy else why or ""
            events.append(HealthEvent(device_id=d.id, healthy=healthy, reason=reason))
    return events

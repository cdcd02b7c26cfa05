"""Sampling Cambricon MLUs for the metrics endpoint: core load, memory, temperature, power.

A reading the card does not offer is absent, never zero (gpustack-devices.md §2.3).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from xpushare.models import DeviceSample, MonitorSnapshot
from xpushare_cambricon.health import handle_of
from xpushare_cambricon.library import Cndev, CndevError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xpushare.models import Device

log = logging.getLogger(__name__)


def sample(cndev: Cndev, devices: Sequence[Device]) -> MonitorSnapshot:
    """One reading per card; a card whose readings fail is reported unhealthy."""
    return MonitorSnapshot(devices=tuple(_one(cndev, d) for d in devices))


def _one(cndev: Cndev, device: Device) -> DeviceSample:
    handle = handle_of(device)
    try:
        memory = cndev.memory(handle)
        utilization = cndev.utilization(handle)
        temperature = cndev.temperature_c(handle)
        power = cndev.power_w(handle)
        return DeviceSample(
            device_id=device.id,
            utilization_percent=None if utilization is None else float(min(utilization, 100)),
            memory_used_mib=memory.used_mib,
            memory_total_mib=memory.total_mib,
            temperature_c=None if temperature is None else float(temperature),
            power_w=None if power is None else float(power),
            healthy=cndev.healthy(handle),
        )
    except CndevError as exc:
        # One card that stopped answering must not hide the others' readings.
        log.warning("Cambricon %s: monitoring failed: %s", device.id, exc)
        return DeviceSample(device_id=device.id, healthy=False)

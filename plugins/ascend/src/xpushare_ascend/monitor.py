"""Sampling Ascend NPUs for the metrics endpoint: AI-core load, memory, temperature, power.

Why every reading may be ``None``: DCMI generations and chip types differ in what they offer
(V2 has no DDR reading; some boards report no power), and a figure that cannot be measured
must show as absent, never as zero (gpustack-devices.md §2.3).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from xpushare.models import DeviceSample, MonitorSnapshot
from xpushare_ascend.health import chip_of, memory_kind_of, verdict
from xpushare_ascend.library import Dcmi, DcmiError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xpushare.models import Device

log = logging.getLogger(__name__)


def sample(dcmi: Dcmi, devices: Sequence[Device]) -> MonitorSnapshot:
    """One reading per device; a chip whose readings fail is reported unhealthy."""
    return MonitorSnapshot(devices=tuple(_one(dcmi, d) for d in devices))


def _one(dcmi: Dcmi, device: Device) -> DeviceSample:
    chip = chip_of(device)
    try:
        healthy, _ = verdict(dcmi, chip, memory_kind_of(device))
        memory = dcmi.memory(chip)
        return DeviceSample(
            device_id=device.id,
            utilization_percent=_percent(dcmi.utilization(chip)),
            memory_used_mib=memory.used_mib if memory else None,
            memory_total_mib=memory.total_mib if memory else None,
            temperature_c=_float(dcmi.temperature_c(chip)),
            power_w=dcmi.power_w(chip),
            healthy=healthy,
        )
    except DcmiError as exc:
        # One chip that stopped answering must not hide the others' readings.
        log.warning("Ascend %s (%s): monitoring failed: %s", device.id, chip, exc)
        return DeviceSample(device_id=device.id, healthy=False)


def _percent(value: int | None) -> float | None:
    return None if value is None else float(min(value, 100))


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)

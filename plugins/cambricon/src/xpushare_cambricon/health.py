"""When a Cambricon MLU counts as healthy, and which cards changed since the inventory.

CNDev's card health state is the signal GPUStack uses (gpustack-devices.md §2.2): 1 healthy,
0 sick. HAMi has no per-card health for Cambricon at all (hami-protocol.md §8.1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpushare.models import Device, HealthEvent

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xpushare_cambricon.library import Cndev


def handle_of(device: Device) -> int:
    """The CNDev handle detect recorded in the device's facts."""
    return int(device.extra["handle"])


def changes(cndev: Cndev, devices: Sequence[Device]) -> list[HealthEvent]:
    """Health events for the cards whose state differs from what they say now."""
    events: list[HealthEvent] = []
    for device in devices:
        healthy = cndev.healthy(handle_of(device))
        if healthy != device.healthy:
            why = (
                "CNDev card health state is healthy"
                if healthy
                else ("CNDev card health state is 0 (sick); see `cnmon info -e`")
            )
            events.append(HealthEvent(device_id=device.id, healthy=healthy, reason=why))
    return events

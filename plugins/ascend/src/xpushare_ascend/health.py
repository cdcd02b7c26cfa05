"""When an Ascend NPU counts as healthy, and which chips changed since the inventory.

Why both signals: DCMI's health code is the driver's own verdict (0 OK, 1 minor alarm, 2
major, 3 critical), and GPUStack additionally reads ECC counters (gpustack-devices.md §2.2).
We trust the driver's code, and add uncorrectable (double-bit) ECC errors of the chip's own
memory (HBM, else DDR): single-bit errors are corrected by ECC itself, and the driver raises
its code once they become a problem, so counting them would take healthy chips away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

from xpushare.models import Device, HealthEvent
from xpushare_ascend.library import HEALTH_MINOR_ALARM, HEALTH_OK, Chip, Dcmi

if TYPE_CHECKING:
    from collections.abc import Sequence

_LEVELS: Final = {2: "major alarm", 3: "critical alarm", 0xFFFFFFFF: "chip not present"}


def verdict(dcmi: Dcmi, chip: Chip, memory_kind: Literal["hbm", "ddr"]) -> tuple[bool, str]:
    """(healthy, why) for one chip; raises ``DcmiError`` when the health code is unreadable."""
    code = dcmi.health(chip)
    if code not in (HEALTH_OK, HEALTH_MINOR_ALARM):
        level = _LEVELS.get(code, "unknown fault")
        return False, f"DCMI health code {code} ({level}); see `npu-smi info -t health`"
    ecc = dcmi.ecc(chip, memory_kind)
    if ecc is not None and ecc.enabled and ecc.double_bit > 0:
        return False, (
            f"{ecc.double_bit} uncorrectable {memory_kind.upper()} ECC error(s); see "
            "`npu-smi info -t ecc`"
        )
    return True, "healthy"


def chip_of(device: Device) -> Chip:
    """The DCMI address detect recorded in the device's facts."""
    return Chip(int(device.extra["card"]), int(device.extra["device"]))


def memory_kind_of(device: Device) -> Literal["hbm", "ddr"]:
    return "ddr" if device.extra.get("memory_kind") == "ddr" else "hbm"


def changes(dcmi: Dcmi, devices: Sequence[Device]) -> list[HealthEvent]:
    """Health events for the devices whose verdict differs from what they say now."""
    events: list[HealthEvent] = []
    for device in devices:
        healthy, why = verdict(dcmi, chip_of(device), memory_kind_of(device))
        if healthy != device.healthy:
            events.append(HealthEvent(device_id=device.id, healthy=healthy, reason=why))
    return events

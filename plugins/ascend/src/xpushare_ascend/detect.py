"""Turning DCMI's chips into xpushare devices: identity, memory, AI cores, health, templates.

Why the facts in ``Device.extra``: the node side (Allocate, health, monitor) needs the DCMI
address and the physical id of each chip, and the scheduler side (fit) needs the AI cores of
each vNPU template to book a chip exactly; the inventory is the one record both sides read.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Final

from xpushare.models import Device, PartitionProfile
from xpushare_ascend.config import VENDOR, AscendConfig, ChipSpec
from xpushare_ascend.health import verdict
from xpushare_ascend.library import Chip, Dcmi, DcmiError

log = logging.getLogger(__name__)

#: Key of ``Device.extra`` listing each template's AI cores, ``name=cores,...``.
TEMPLATE_CORES_KEY: Final = "template_ai_cores"


def device_id(die: tuple[int, ...]) -> str:
    """The stable id of a chip: its die serial. GPUStack keys Ascend chips the same way and
    drops a chip whose id cannot be read rather than key it by its PCI address, which
    changes when the card moves (gpustack-devices.md §2.1)."""
    return "NPU-" + "-".join(f"{word:08x}" for word in die)


def numa_node(config: AscendConfig, pci_bus_id: str | None) -> int | None:
    if pci_bus_id is None:
        return None
    path = Path(config.sysfs_root) / "bus" / "pci" / "devices" / pci_bus_id / "numa_node"
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None  # -1: the platform has no NUMA affinity


def partitions(spec: ChipSpec | None, ai_core: int) -> tuple[PartitionProfile, ...]:
    """The chip's vNPU templates as partition profiles.

    ``compute_percent`` is rounded up so a generic reader never books more than the chip
    has; the exact AI cores are in ``Device.extra`` for the Ascend fit.
    """
    if spec is None or ai_core <= 0:
        return ()
    return tuple(
        PartitionProfile(
            name=t.name,
            memory_mib=t.memory_mib,
            compute_percent=min(100, math.ceil(100 * t.ai_core / ai_core)),
            max_count=max(1, ai_core // t.ai_core),
        )
        for t in spec.templates
        if t.ai_core <= ai_core
    )


def detect(dcmi: Dcmi, config: AscendConfig) -> list[Device]:
    """Every NPU chip DCMI reports, in logical-id order.

    :raises DcmiError: a reading every device needs failed ("could not detect").
    """
    devices: list[Device] = []
    for chip in dcmi.chips():
        device = _device(dcmi, config, chip)
        if device is not None:
            devices.append(device)
    return sorted(devices, key=lambda d: d.index)


def _device(dcmi: Dcmi, config: AscendConfig, chip: Chip) -> Device | None:
    info = dcmi.chip_info(chip)
    die = dcmi.die_id(chip)
    if die is None:
        log.warning(
            "Ascend %s (%s%s): die id unreadable, chip left out of the inventory",
            chip,
            info.chip_type,
            info.chip_name,
        )
        return None
    memory = dcmi.memory(chip)
    if memory is None:
        raise DcmiError("dcmi_get_device_hbm_info/memory_info", -8255, f"{chip}: no memory size")
    logic = dcmi.logic_id(chip)
    phy = dcmi.phy_id(chip)
    healthy, why = verdict(dcmi, chip, memory.kind)
    if not healthy:
        log.warning("Ascend %s (phy %d) is unhealthy: %s", chip, phy, why)
    spec = config.chip_spec(info.chip_name)
    profiles = partitions(spec, info.ai_core)
    pci = dcmi.pci_bus_id(chip)
    most_vnpus = max((p.max_count for p in profiles), default=1)
    extra = {
        "chip_type": info.chip_type,
        "chip_name": info.chip_name,
        "chip_ver": info.chip_ver,
        "card": str(chip.card),
        "device": str(chip.device),
        "logic_id": str(logic),
        "phy_id": str(phy),
        "dcmi_api": f"v{dcmi.generation}",
        "memory_kind": memory.kind,
    }
    if info.npu_name:
        extra["npu_name"] = info.npu_name
    if spec is not None:
        extra["common_word"] = spec.common_word
        if spec.super_pod:
            extra["super_pod"] = "true"
        if profiles:
            extra[TEMPLATE_CORES_KEY] = ",".join(
                f"{t.name}={t.ai_core}" for t in spec.templates if t.ai_core <= info.ai_core
            )
    return Device(
        vendor=VENDOR,
        id=device_id(die),
        index=logic,
        model=spec.common_word if spec else f"{info.chip_type}{info.chip_name}",
        memory_mib=memory.total_mib,
        compute_units=info.ai_core,
        # As many containers as the smallest template fits times over; 1 without templates.
        share_slots=most_vnpus,
        numa_node=numa_node(config, pci),
        pci_bus_id=pci,
        healthy=healthy,
        mode="vnpu" if profiles else "exclusive",
        partitions=profiles,
        extra=extra,
    )

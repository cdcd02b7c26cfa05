"""Turning CNDev's cards into xpushare devices: identity, memory, cores, health, sMLU.

Why the facts in ``Device.extra``: Allocate needs each card's slot (the N of
``/dev/cambricon_dev<N>``) and CNDev handle, and the fit needs to know whether the card can
be cut into sMLU instances; the inventory is the one record both sides read.
"""

from __future__ import annotations

import logging
from pathlib import Path

from xpushare.models import Device
from xpushare_cambricon.config import VENDOR, CambriconConfig
from xpushare_cambricon.library import Cndev

log = logging.getLogger(__name__)


def numa_node(config: CambriconConfig, pci_bus_id: str | None) -> int | None:
    if pci_bus_id is None:
        return None
    path = Path(config.sysfs_root) / "bus" / "pci" / "devices" / pci_bus_id / "numa_node"
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None  # -1: the platform has no NUMA affinity


def device_id(uuid: str) -> str:
    """``MLU-<uuid>``: CNDev's 36-character UUID with the prefix Cambricon's tools show
    (cndevUUID_t holds 37 bytes, so the prefix is not part of it)."""
    return uuid if uuid.startswith("MLU-") else f"MLU-{uuid}"


def detect(cndev: Cndev, config: CambriconConfig) -> list[Device]:
    """Every MLU card CNDev reports, by slot.

    :raises CndevError: a reading every card needs failed ("could not detect").
    """
    devices: list[Device] = []
    for slot in range(cndev.count()):
        handle = cndev.handle(slot)
        uuid = cndev.uuid(handle)
        if not uuid.strip("0-"):
            # Never key a card by its PCI address, which changes when it moves
            # (gpustack-devices.md §2.1).
            log.warning("Cambricon card %d: UUID unreadable, card left out of the inventory", slot)
            continue
        memory = cndev.memory(handle)
        pci = cndev.pci_bus_id(handle)
        smlu = config.share_mode == "smlu" and cndev.smlu_supported(handle)
        shares = config.share_slots if smlu or config.share_mode == "env" else 1
        devices.append(
            Device(
                vendor=VENDOR,
                id=device_id(uuid),
                index=slot,
                model=cndev.name(handle) or "MLU",
                memory_mib=memory.total_mib,
                compute_units=cndev.cores(handle) or 0,
                share_slots=shares,
                numa_node=numa_node(config, pci),
                pci_bus_id=pci,
                healthy=cndev.healthy(handle),
                mode={"smlu": "smlu", "env": "env-split"}.get(config.share_mode, "exclusive")
                if shares > 1
                else "exclusive",
                extra={"slot": str(slot), "handle": str(handle), "smlu": str(smlu).lower()},
            )
        )
    return devices

"""Iluvatar detection: the GPUs IXML enumerates, keyed by their UUIDs."""

from __future__ import annotations

import logging
from typing import Final

from xpushare.models import Device
from xpushare_others.common import sysfs
from xpushare_others.iluvatar.config import VENDOR, IluvatarConfig
from xpushare_others.iluvatar.library import HEALTH_OK, Ixml

log = logging.getLogger(__name__)

MIB: Final = 1024 * 1024


def detect(ixml: Ixml, config: IluvatarConfig) -> list[Device]:
    devices: list[Device] = []
    for index in range(ixml.count()):
        h = ixml.handle(index)
        model = ixml.text("nvmlDeviceGetName", h, 96, index) or "Iluvatar GPU"
        if config.chip_filter and config.chip.upper() not in model.upper():
            log.info(
                "vendor iluvatar: GPU %d (%s) is not a %s, left to another deployment",
                index,
                model,
                config.chip,
            )
            continue
        pci = ixml.pci(h, index)
        bdf = sysfs.normalize_bdf(pci.busId.decode(errors="replace")) or sysfs.bdf_from_parts(
            pci.domain, pci.bus, pci.device, 0
        )
        health = ixml.health(h, index)
        minor = ixml.minor(h, index)
        extra = {"driver_version": ixml.driver_version, "chip": config.chip}
        if minor is not None:
            extra["minor"] = str(minor)
        devices.append(
            Device(
                vendor=VENDOR,
                id=ixml.text("nvmlDeviceGetUUID", h, 80, index),
                index=index,
                model=model,
                memory_mib=ixml.memory(h, index).total // MIB,
                share_slots=config.share_slots,
                numa_node=sysfs.numa_node(config.sysfs_root, bdf),
                pci_bus_id=bdf,
                healthy=health is None or health == HEALTH_OK,
                extra={k: v for k, v in extra.items() if v},
            )
        )
    return devices

"""Kunlun detection: the XPUs XPUML enumerates, named as HAMi names them unless told otherwise."""

from __future__ import annotations

from typing import Final

from xpushare.models import Device
from xpushare_others.common import sysfs
from xpushare_others.kunlun.config import VXPU_VENDOR, KunlunConfig
from xpushare_others.kunlun.library import Xpuml, problem

MIB: Final = 2**20


def device_id(config: KunlunConfig, node: str, index: int, serial: str) -> str:
    """HAMi's ``<node>-kunlun-<index>`` (its synthesised inventory), or the serial number."""
    if config.id_format == "serial" and serial:
        return serial
    return f"{node}-kunlun-{index}"


def detect(xpuml: Xpuml, config: KunlunConfig, vendor: str, node: str) -> list[Device]:
    devices: list[Device] = []
    vxpu = vendor == VXPU_VENDOR
    for index in range(xpuml.count()):
        serial = xpuml.serial(index)
        pci = xpuml.pci(index)
        bdf = sysfs.normalize_bdf(pci.busId.decode(errors="replace")) if pci else None
        extra = {"minor": str(xpuml.minor(index))}
        if serial:
            extra["serial"] = serial
        why = problem(xpuml.state(index))
        if why:
            extra["state"] = why
        devices.append(
            Device(
                vendor=vendor,
                id=device_id(config, node, index, serial),
                index=index,
                model=xpuml.name(index) or "Kunlun XPU",
                memory_mib=xpuml.memory(index).totalGlobalMemory // MIB,
                share_slots=config.share_slots if vxpu else 1,
                numa_node=sysfs.numa_node(config.sysfs_root, bdf),
                pci_bus_id=bdf,
                healthy=why is None,
                mode="vxpu" if vxpu else "exclusive",
                extra=extra,
            )
        )
    return devices

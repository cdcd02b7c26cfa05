"""T-Head detection: the PPUs HGML enumerates, keyed by their UUIDs.

``index`` is HGML's enumeration ordinal, which names the PPU's node ``/dev/alixpu_ppu<N>``
(GPUStack: the ordinal, not the minor number, names that node); the minor is kept in
``extra.minor``. A PPU with uncorrected volatile ECC errors is unhealthy (GPUStack's rule).
"""

from __future__ import annotations

from typing import Final

from xpushare.models import Device
from xpushare_others.common import sysfs
from xpushare_others.thead.config import VENDOR, TheadConfig
from xpushare_others.thead.library import NAME_LEN, UUID_LEN, Hgml

MIB: Final = 1024 * 1024


def healthy(ecc: int | None) -> bool:
    return ecc is None or ecc == 0


def detect(hgml: Hgml, config: TheadConfig) -> list[Device]:
    devices: list[Device] = []
    for index in range(hgml.count()):
        h = hgml.handle(index)
        pci = hgml.pci(h, index)
        bdf = sysfs.normalize_bdf(pci.busId.decode(errors="replace")) or sysfs.bdf_from_parts(
            pci.domain, pci.bus, pci.device, 0
        )
        minor = hgml.minor(h, index)
        extra = {"driver_version": hgml.driver_version}
        if minor is not None:
            extra["minor"] = str(minor)
        devices.append(
            Device(
                vendor=VENDOR,
                id=hgml.text("hgmlDeviceGetUUID", h, UUID_LEN, index),
                index=index,
                model=hgml.text("hgmlDeviceGetName", h, NAME_LEN, index) or "T-Head PPU",
                memory_mib=hgml.memory(h, index).total // MIB,
                share_slots=config.share_slots,
                numa_node=sysfs.numa_node(config.sysfs_root, bdf),
                pci_bus_id=bdf,
                healthy=healthy(hgml.uncorrected_ecc(h, index)),
                extra={k: v for k, v in extra.items() if v},
            )
        )
    return devices

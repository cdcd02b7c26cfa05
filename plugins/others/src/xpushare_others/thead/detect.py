"""T-Head detection: the PPUs HGML enumerates, keyed by their UUIDs.

``index`` is HGML's enumeration ordinal, which names the PPU's node ``/dev/alixpu_ppu<N>``
(GPUStack: the ordinal, not the minor number, names that node); the minor is kept in
``extra.minor``. A PPU with uncorrected volatile ECC errors is unhealthy (GPUStack's rule).

A PPU in MIG mode (``hgmlDeviceGetMigMode``) is published as NVIDIA's dynamic MIG GPUs are:
mode ``mig``, its GPU instance profiles with their placements as ``partitions`` (the core's
:class:`~xpushare.models.PartitionProfile`), one container per instance; the instances are
cut at Allocate (:mod:`.instances`). Its profiles are kept on the HGML object for that.
"""

from __future__ import annotations

from typing import Final

from xpushare.models import Device, PartitionProfile
from xpushare_others.common import sysfs
from xpushare_others.thead import mig
from xpushare_others.thead.config import VENDOR, TheadConfig
from xpushare_others.thead.library import NAME_LEN, UUID_LEN, Hgml

MIB: Final = 1024 * 1024


def healthy(ecc: int | None) -> bool:
    return ecc is None or ecc == 0


def partitions(profiles: tuple[mig.GiProfile, ...]) -> tuple[PartitionProfile, ...]:
    # The PPU's compute slices: no profile's instances together exceed them (8g96gb x 1).
    slices = max((p.compute_slices * p.count for p in profiles), default=1)
    return tuple(p.partition(slices) for p in profiles)


def detect(hgml: Hgml, config: TheadConfig) -> list[Device]:
    devices: list[Device] = []
    with_mig = mig.available(hgml)
    geometry: dict[int, tuple[mig.GiProfile, ...]] = {}
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
        # A PPU in MIG mode is never served whole, even when no profile could be read.
        split = with_mig and mig.enabled(hgml, h, index)
        profiles = mig.read_profiles(hgml, h, index) if split else ()
        if split:
            geometry[index] = profiles
            extra["mig_mode"] = "enabled"
        devices.append(
            Device(
                vendor=VENDOR,
                id=hgml.text("hgmlDeviceGetUUID", h, UUID_LEN, index),
                index=index,
                model=hgml.text("hgmlDeviceGetName", h, NAME_LEN, index) or "T-Head PPU",
                memory_mib=hgml.memory(h, index).total // MIB,
                share_slots=max((p.count for p in profiles), default=config.share_slots),
                numa_node=sysfs.numa_node(config.sysfs_root, bdf),
                pci_bus_id=bdf,
                healthy=healthy(hgml.uncorrected_ecc(h, index)),
                mode=mig.MIG_MODE if split else "shared",
                partitions=partitions(profiles),
                extra={k: v for k, v in extra.items() if v},
            )
        )
    hgml.geometry = geometry
    return devices

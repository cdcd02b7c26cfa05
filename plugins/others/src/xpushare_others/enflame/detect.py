"""Enflame detection: the GCUs EFML enumerates, named as HAMi names them unless told otherwise.

A DRS GCU also carries its profiles (as ``partitions``, with Enflame's profile ids in
``extra``) and its slice capacity: the fit picks a profile from them (:mod:`.drs`). They are
what efsmi lists for that GCU, or the settings' (:mod:`.profiles` says when);
``extra["drs-profiles-from"]`` says which. Its memory is that of the largest profile (HAMi's
``maxMemGB * 1024``), so the memory booked by pods HAMi placed, in profile MiB, is measured
against the same total.
"""

from __future__ import annotations

from xpushare.models import Device
from xpushare_others.common import sysfs
from xpushare_others.enflame import profiles
from xpushare_others.enflame.config import DRS_VENDOR, EnflameConfig
from xpushare_others.enflame.library import Efml


def device_id(config: EnflameConfig, vendor: str, node: str, index: int, uuid: str) -> str:
    """HAMi's ``<node>-GCU-<i>`` / ``<node>-enflame-drs-<i>``, or the GCU's UUID."""
    if config.id_format == "uuid" and uuid:
        return uuid
    return f"{node}-enflame-drs-{index}" if vendor == DRS_VENDOR else f"{node}-GCU-{index}"


def detect(
    efml: Efml,
    config: EnflameConfig,
    vendor: str,
    node: str,
    source: profiles.ProfileSource | None = None,
) -> list[Device]:
    """The GCUs; a DRS GCU's profiles come from *source* (none: the settings')."""
    devices: list[Device] = []
    split = vendor == DRS_VENDOR
    for index in range(efml.count()):
        uuid = efml.uuid(index)
        drs = None
        if split:
            drs = source.of(index, uuid) if source else profiles.settings_layout(config)
        info = efml.info(index)
        bdf = (
            sysfs.bdf_from_parts(info.domain_id, info.bus_id, info.dev_id, info.func_id)
            if info
            else None
        )
        extra = {"minor": str(index)}
        if uuid:
            extra["uuid"] = uuid
        healthy = efml.healthy(index) is not False
        if not healthy:
            extra["state"] = "unhealthy"
        if drs is not None:
            extra["drs-capacity"] = str(drs.slices)
            extra["drs-profiles-from"] = drs.source
            extra.update(drs.ids)
        devices.append(
            Device(
                vendor=vendor,
                id=device_id(config, vendor, node, index, uuid),
                index=index,
                model=efml.name(index) or "Enflame GCU",
                memory_mib=drs.memory_mib if drs else int(efml.memory(index).mem_total_size),
                share_slots=drs.slices if drs else 1,
                numa_node=sysfs.numa_node(config.sysfs_root, bdf),
                pci_bus_id=bdf,
                healthy=healthy,
                mode="drs" if split else "exclusive",
                partitions=drs.partitions if drs else (),
                extra=extra,
            )
        )
    return devices

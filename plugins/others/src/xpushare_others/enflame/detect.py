"""Enflame detection: the GCUs EFML enumerates, named as HAMi names them unless told otherwise.

A DRS GCU also carries its profiles (as ``partitions``, with Enflame's profile ids in
``extra``) and its slice capacity: the fit picks a profile from them (:mod:`.drs`). Its memory
is that of the largest profile (HAMi's ``maxMemGB * 1024``), so the memory booked by pods HAMi
placed, in profile MiB, is measured against the same total.
"""

from __future__ import annotations

from xpushare.models import Device, PartitionProfile
from xpushare_others.common import sysfs
from xpushare_others.enflame import drs
from xpushare_others.enflame.config import DRS_VENDOR, EnflameConfig
from xpushare_others.enflame.library import Efml


def device_id(config: EnflameConfig, vendor: str, node: str, index: int, uuid: str) -> str:
    """HAMi's ``<node>-GCU-<i>`` / ``<node>-enflame-drs-<i>``, or the GCU's UUID."""
    if config.id_format == "uuid" and uuid:
        return uuid
    return f"{node}-enflame-drs-{index}" if vendor == DRS_VENDOR else f"{node}-GCU-{index}"


def drs_layout(
    config: EnflameConfig,
) -> tuple[int, tuple[PartitionProfile, ...], dict[str, str], int]:
    """(slices, profiles, their ids as ``extra`` keys, memory) of every GCU of a DRS node."""
    candidates = drs.profiles(config.drs_profiles)
    slices = drs.capacity(config.drs_profiles, config.drs_capacity)
    parts = tuple(
        PartitionProfile(
            name=p.name,
            memory_mib=p.memory_mib,
            compute_percent=p.compute_percent,
            max_count=max(1, slices // p.slices),
        )
        for p in candidates
    )
    ids = {f"{drs.PROFILE_ID_PREFIX}{p.name}": p.id for p in candidates}
    memory = max(p.memory_mib for p in candidates)
    return slices, parts, ids, memory


def detect(efml: Efml, config: EnflameConfig, vendor: str, node: str) -> list[Device]:
    devices: list[Device] = []
    split = vendor == DRS_VENDOR
    slices, parts, ids, drs_memory = drs_layout(config) if split else (1, (), {}, 0)
    for index in range(efml.count()):
        uuid = efml.uuid(index)
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
        if split:
            extra["drs-capacity"] = str(slices)
            extra.update(ids)
        devices.append(
            Device(
                vendor=vendor,
                id=device_id(config, vendor, node, index, uuid),
                index=index,
                model=efml.name(index) or "Enflame GCU",
                memory_mib=drs_memory if split else int(efml.memory(index).mem_total_size),
                share_slots=slices if split else 1,
                numa_node=sysfs.numa_node(config.sysfs_root, bdf),
                pci_bus_id=bdf,
                healthy=healthy,
                mode="drs" if split else "exclusive",
                partitions=parts,
                extra=extra,
            )
        )
    return devices

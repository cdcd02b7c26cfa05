"""Hygon detection: one :class:`~xpushare.models.Device` per DCU that ROCm SMI enumerates.

Compute units come from the KFD topology in sysfs (``simd_count / simd_per_cu`` of the node
whose PCI location matches), where ROCm itself reads them: the library has no call for them,
and the vDCU config needs the exact count to build its CU mask.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from xpushare.models import Device
from xpushare_others.common import sysfs
from xpushare_others.hygon.config import VENDOR, HygonConfig
from xpushare_others.hygon.library import Rsmi, decode_pci_id

MIB: Final = 1024 * 1024

#: Where the DCU driver states its version (gpustack-devices.md §1.3), relative to sysfs.
DRIVER_VERSION_FILES: Final = ("module/hydcu/version", "module/hycu/version")

#: DRM render nodes are numbered from 128 (the kernel's DRM_MINOR_RENDER base); the card
#: node of the same device is the render minor minus 128.
RENDER_BASE: Final = 128


def kfd_compute_units(sysfs_root: str) -> dict[str, int]:
    """Compute units per PCI address, from ``class/kfd/kfd/topology/nodes/*/properties``."""
    out: dict[str, int] = {}
    for props in sorted(Path(sysfs_root, "class/kfd/kfd/topology/nodes").glob("*/properties")):
        try:
            lines = props.read_text().splitlines()
        except OSError:
            continue
        values: dict[str, int] = {}
        for line in lines:
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                values[key] = int(value)
        simds, per_cu = values.get("simd_count", 0), values.get("simd_per_cu", 0)
        if simds <= 0 or per_cu <= 0 or "location_id" not in values:
            continue  # a CPU node, or a node without the fields
        loc = values["location_id"]
        bdf = sysfs.bdf_from_parts(values.get("domain", 0), loc >> 8, (loc >> 3) & 0x1F, loc & 7)
        out[bdf] = simds // per_cu
    return out


def detect(rsmi: Rsmi, config: HygonConfig) -> list[Device]:
    cus = kfd_compute_units(config.sysfs_root)
    driver = sysfs.read_first(config.sysfs_root, *DRIVER_VERSION_FILES) or ""
    devices: list[Device] = []
    for index in range(rsmi.count()):
        bdf = sysfs.bdf_from_parts(*decode_pci_id(rsmi.pci_id(index)))
        unique = rsmi.unique_id(index)
        ecc = rsmi.uncorrectable_ecc(index)
        render = rsmi.render_minor(index)
        numa = rsmi.numa(index)
        if numa is None:
            numa = sysfs.numa_node(config.sysfs_root, bdf)
        extra = {"hami_id": f"DCU-{index}", "driver_version": driver}
        if render is not None and render >= RENDER_BASE:
            extra["render_minor"] = str(render)
            extra["card_minor"] = str(render - RENDER_BASE)
        devices.append(
            Device(
                vendor=VENDOR,
                # The ASIC's unique id where the DCU reports one; else its PCI address, which
                # is stable for a card in a slot (never the index, which can shift).
                id=f"DCU-{unique:016x}" if unique else f"DCU-{bdf}",
                index=index,
                model=rsmi.name(index) or "Hygon DCU",
                memory_mib=rsmi.memory_total(index) // MIB,
                compute_units=cus.get(bdf, 0),
                share_slots=config.share_slots,
                numa_node=numa,
                pci_bus_id=bdf,
                healthy=not ecc,
                extra={k: v for k, v in extra.items() if v},
            )
        )
    return devices

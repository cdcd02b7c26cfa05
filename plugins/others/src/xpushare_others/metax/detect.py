"""MetaX detection: the physical GPUs MXSML enumerates (virtual functions left out)."""

from __future__ import annotations

from typing import Final

from xpushare.models import Device
from xpushare_others.common import sysfs
from xpushare_others.metax.config import VENDOR, MetaxConfig
from xpushare_others.metax.library import MODE_VF, Mxsml

KIB_PER_MIB: Final = 1024


def detect(mxsml: Mxsml, config: MetaxConfig) -> list[Device]:
    devices: list[Device] = []
    for index in range(mxsml.count()):
        info = mxsml.info(index)
        if info.mode == MODE_VF:
            continue
        bdf = sysfs.normalize_bdf(info.bdfId.decode(errors="replace"))
        card, render = sysfs.drm_minors(config.sysfs_root, bdf)
        extra = {}
        if card is not None:
            extra["card_minor"] = str(card)
        if render is not None:
            extra["render_minor"] = str(render)
        ue = mxsml.dram_ue(index)
        devices.append(
            Device(
                vendor=VENDOR,
                id=info.uuid.decode(errors="replace").strip(),
                index=index,
                model=info.deviceName.decode(errors="replace").strip() or "MetaX GPU",
                memory_mib=mxsml.memory(index).vramTotal // KIB_PER_MIB,
                share_slots=config.share_slots if config.mode == "sgpu" else 1,
                numa_node=sysfs.numa_node(config.sysfs_root, bdf),
                pci_bus_id=bdf,
                healthy=not ue,
                mode="sgpu" if config.mode == "sgpu" else "exclusive",
                extra=extra,
            )
        )
    return devices

"""Biren detection: BRML's GPUs, or each SVI instance of a split GPU, as ``card_<node id>``.

Why that id: Biren's driver names each GPU (or instance) node ``/dev/biren/card_<node id>``
and HAMi's Biren device plugin registers the same string as the device id, so a migrated
cluster's ``hami.io/Biren-devices-allocated`` annotations name the devices found here. The
GPU's BRML UUID is kept in ``extra.uuid`` (an instance's as ``<uuid>-instance-<j>``, Biren's
form); ``extra.gpu`` and ``extra.instance`` say where BRML finds the device again.
"""

from __future__ import annotations

from ctypes import c_void_p
from typing import Final

from xpushare.models import Device
from xpushare_others.biren.config import VENDOR, BirenConfig
from xpushare_others.biren.library import HEALTH_UNHEALTHY_FROM, Brml
from xpushare_others.common import sysfs

MIB: Final = 1024 * 1024
#: Instances one GPU can be split into (brml.h: SVI modes 1, 2 and 4).
SVI_MODES: Final = (2, 4)
GPU: Final = "gpu"
INSTANCE: Final = "instance"


def card_id(node_id: int) -> str:
    return f"card_{node_id}"


def handle_of(brml: Brml, device: Device) -> c_void_p:
    """BRML's handle of *device*: its GPU's, or the SVI instance's."""
    gpu = int(device.extra[GPU])
    handle = brml.handle(gpu)
    instance = device.extra.get(INSTANCE)
    if instance is None:
        return handle
    return brml.instance(handle, int(instance), f"SVI instance {instance} of GPU {gpu}")


def healthy(value: int | None) -> bool:
    return value is None or value < HEALTH_UNHEALTHY_FROM


def detect(brml: Brml, config: BirenConfig) -> list[Device]:
    devices: list[Device] = []
    for index in range(brml.count()):
        where = f"GPU {index}"
        h = brml.handle(index)
        uuid = brml.uuid(h, where)
        model = brml.name(h, where) or "Biren GPU"
        pci = brml.pci(h, where)
        bdf = sysfs.normalize_bdf(pci.busId.decode(errors="replace")) or sysfs.bdf_from_parts(
            pci.domain, pci.bus, pci.device, pci.function
        )
        numa = sysfs.numa_node(config.sysfs_root, bdf)
        state = brml.health(h, where)
        mode = brml.svi_mode(h, where) if config.svi_instances else 1
        parts: list[tuple[c_void_p, str, dict[str, str]]] = []
        if mode in SVI_MODES:
            for j in range(mode):
                part = brml.instance(h, j, f"SVI instance {j} of {where}")
                parts.append((part, f"{uuid}-instance-{j}", {INSTANCE: str(j)}))
        else:
            parts.append((h, uuid, {}))
        for handle, part_uuid, extra in parts:
            node_id = brml.node_id(handle, where)
            info = {
                "uuid": part_uuid,
                GPU: str(index),
                "driver_version": brml.driver_version,
                "svi_mode": str(mode) if mode in SVI_MODES else "",
                **extra,
            }
            devices.append(
                Device(
                    vendor=VENDOR,
                    id=card_id(node_id),
                    index=node_id,
                    model=model,
                    memory_mib=brml.memory(handle, where).total // MIB,
                    share_slots=config.share_slots,
                    numa_node=numa,
                    pci_bus_id=bdf,
                    healthy=healthy(state),
                    extra={k: v for k, v in info.items() if v},
                )
            )
    return devices

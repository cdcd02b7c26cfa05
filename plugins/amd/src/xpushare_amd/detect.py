"""Detection: what amdsmi reports about each GPU, turned into xpushare :class:`Device` entries.

Per logical GPU (a whole GPU, or one partition of an MI300-class GPU): identity (ASIC unique
id and amdsmi's UUID), PCI bus id, market name, VRAM, compute units, NUMA node, the compute
and memory partition modes, the DRM card and render minors and the KFD node (Allocate needs
them), XGMI hive and links, and health from uncorrectable UMC (memory) ECC errors, the signal
GPUStack uses for AMD (research/gpustack-devices.md §2.2).

Error and empty are different answers (DESIGN.md §4): a library that lists no GPU returns an
empty inventory; a failing enumeration raises, so the node agent keeps its last good one. A
GPU whose identity or VRAM cannot be read is left out with a warning that names it, as
GPUStack does (§2.1): keying it by something unstable would break every pod placed on it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xpushare.models import Device, LinkKind, TopologyLink
from xpushare_amd import ids
from xpushare_amd.config import BYTES_PER_MIB, VENDOR

if TYPE_CHECKING:
    from xpushare_amd.library import Smi

log = logging.getLogger(__name__)

#: amdsmi's "not available" string, and the uint32 it stands for (MaxUIntegerTypes).
_NA = "N/A"
_NA32 = 0xFFFFFFFF


class DetectionError(RuntimeError):
    """amdsmi could not enumerate this node's GPUs ("could not detect", not "none here")."""


@dataclass
class RawGpu:
    """One processor handle's facts, before ids are assigned."""

    index: int
    handle: Any
    uuid: str | None
    serial: int | None
    bdf: str | None
    model: str
    vram_mib: int
    compute_units: int
    numa_node: int | None
    compute_partition: str | None
    memory_partition: str | None
    partition_id: int | None
    render_minor: int | None
    card_minor: int | None
    kfd_node: int | None
    xgmi_hive: int | None
    gfx_target: str | None
    uncorrectable_ecc: int | None
    physical: str = ""
    id: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _number(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value == _NA32:
        return None
    return value


def _serial(asic: dict[str, Any] | None) -> int | None:
    raw = (asic or {}).get("asic_serial")
    if not isinstance(raw, str) or raw in ("", _NA):
        return None
    try:
        value = int(raw, 16)
    except ValueError:
        return None
    return value or None


def _text(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if value and value != _NA else None


def read_gpu(smi: Smi, index: int, handle: Any) -> RawGpu | None:
    """Everything detection needs from one handle; ``None`` if it cannot be keyed or sized."""
    api = smi.api
    asic = smi.optional("amdsmi_get_gpu_asic_info", handle)
    uuid = _text(smi.optional("amdsmi_get_gpu_device_uuid", handle))
    bdf = _text(smi.optional("amdsmi_get_gpu_device_bdf", handle))
    serial = _serial(asic)
    where = f"GPU {index}" + (f" ({bdf})" if bdf else "")
    if serial is None and uuid is None:
        log.warning(
            "vendor %s: %s left out: neither its unique id nor its UUID can be read", VENDOR, where
        )
        return None
    total = smi.optional("amdsmi_get_gpu_memory_total", handle, api.AmdSmiMemoryType.VRAM)
    if isinstance(total, int) and total > 0:
        vram_mib = total // BYTES_PER_MIB
    else:
        usage = smi.optional("amdsmi_get_gpu_vram_usage", handle) or {}
        vram_mib = _number(usage.get("vram_total")) or 0
    if vram_mib <= 0:
        log.warning("vendor %s: %s left out: its VRAM size cannot be read", VENDOR, where)
        return None
    enum = smi.optional("amdsmi_get_gpu_enumeration_info", handle) or {}
    kfd = smi.optional("amdsmi_get_gpu_kfd_info", handle) or {}
    xgmi = smi.optional("amdsmi_get_xgmi_info", handle) or {}
    ecc = smi.optional("amdsmi_get_gpu_ecc_count", handle, api.AmdSmiGpuBlock.UMC)
    numa = smi.optional("amdsmi_topo_get_numa_node_number", handle)
    model = _text((asic or {}).get("market_name"))
    if model is None:
        device_id = _text((asic or {}).get("device_id"))
        model = f"AMD GPU {device_id}" if device_id else "AMD GPU"
    hive = _number(xgmi.get("xgmi_hive_id"))
    return RawGpu(
        index=index,
        handle=handle,
        uuid=uuid,
        serial=serial,
        bdf=bdf,
        model=model,
        vram_mib=vram_mib,
        compute_units=_number((asic or {}).get("num_compute_units")) or 0,
        numa_node=_number(numa),
        compute_partition=_text(smi.optional("amdsmi_get_gpu_compute_partition", handle)),
        memory_partition=_text(smi.optional("amdsmi_get_gpu_memory_partition", handle)),
        partition_id=_number(kfd.get("current_partition_id")),
        render_minor=_number(enum.get("drm_render")),
        card_minor=_number(enum.get("drm_card")),
        kfd_node=_number(kfd.get("node_id")),
        xgmi_hive=hive or None,
        gfx_target=_text((asic or {}).get("target_graphics_version")),
        uncorrectable_ecc=_number((ecc or {}).get("uncorrectable_count")),
    )


def assign_ids(gpus: list[RawGpu]) -> None:
    """Give each GPU its id (see :mod:`xpushare_amd.ids`): whole GPUs by their physical id,
    partitions by physical id, mode and partition index."""
    groups: dict[str, list[RawGpu]] = defaultdict(list)
    for gpu in gpus:
        gpu.physical = ids.physical_id(gpu.serial) if gpu.serial else str(gpu.uuid)
        groups[gpu.physical].append(gpu)
    for members in groups.values():
        mode = (members[0].compute_partition or "").lower()
        whole = len(members) == 1 and mode in ids.WHOLE_MODES
        if whole:
            members[0].id = members[0].physical
            continue
        if members[0].serial is None:
            # Keyed by a shared UUID: no layout can be read back from these ids.
            for position, gpu in enumerate(members):
                gpu.id = f"{gpu.physical}-{position}"
            continue
        label = mode if mode not in ids.WHOLE_MODES else "part"
        parts = [g.partition_id for g in members]
        usable = None not in parts and len(set(parts)) == len(parts)
        for position, gpu in enumerate(members):
            part = gpu.partition_id if usable and gpu.partition_id is not None else position
            gpu.id = ids.device_id(gpu.physical, label, part)


def links(smi: Smi, gpus: list[RawGpu]) -> dict[int, list[TopologyLink]]:
    """XGMI links (and partitions of one package) between the GPUs, per GPU index."""
    api = smi.api
    out: dict[int, list[TopologyLink]] = defaultdict(list)
    xgmi = api.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI
    internal = api.AmdSmiLinkType.AMDSMI_LINK_TYPE_INTERNAL
    for a in gpus:
        for b in gpus:
            if a is b:
                continue
            found = smi.optional("amdsmi_topo_get_link_type", a.handle, b.handle)
            kind = (found or {}).get("type")
            if kind == xgmi:
                out[a.index].append(TopologyLink(peer=b.id, kind=LinkKind.XGMI))
            elif kind == internal:
                out[a.index].append(TopologyLink(peer=b.id, kind=LinkKind.SAME_BOARD))
    return out


def _extra(gpu: RawGpu, smi: Smi) -> dict[str, str]:
    facts: dict[str, object] = {
        "uuid": gpu.uuid,
        "physical_gpu": gpu.physical,
        "compute_partition": gpu.compute_partition,
        "memory_partition": gpu.memory_partition,
        "partition_id": gpu.partition_id,
        "render_minor": gpu.render_minor,
        "card_minor": gpu.card_minor,
        "kfd_node": gpu.kfd_node,
        "xgmi_hive": f"{gpu.xgmi_hive:#x}" if gpu.xgmi_hive else None,
        "gfx_target": gpu.gfx_target,
        "amdsmi_wrapper": smi.wrapper_version,
    }
    return {k: str(v) for k, v in facts.items() if v is not None}


def detect(smi: Smi, share_slots: int) -> tuple[list[Device], dict[str, Any]]:
    """The node's AMD GPUs as inventory (``[]`` if amdsmi lists none), and each device's
    processor handle by id, for monitoring.

    :raises DetectionError: the GPUs could not be enumerated.
    """
    try:
        handles = smi.api.amdsmi_get_processor_handles()
    except smi.error as exc:
        raise DetectionError(
            f"vendor {VENDOR!r}: amdsmi could not list the GPUs ({smi.status(exc)}); the "
            "last inventory is kept. Check the amdgpu driver (dmesg) and `amd-smi list`."
        ) from exc
    gpus = [g for i, h in enumerate(handles) if (g := read_gpu(smi, i, h)) is not None]
    assign_ids(gpus)
    linked = links(smi, gpus)
    devices = []
    for gpu in gpus:
        partitioned = gpu.id != gpu.physical and ids.parse(gpu.id).mode is not None
        devices.append(
            Device(
                vendor=VENDOR,
                id=gpu.id,
                index=gpu.index,
                model=gpu.model,
                memory_mib=gpu.vram_mib,
                compute_units=gpu.compute_units,
                share_slots=share_slots,
                numa_node=gpu.numa_node,
                pci_bus_id=gpu.bdf,
                healthy=not gpu.uncorrectable_ecc,
                mode=ids.parse(gpu.id).layout if partitioned else "shared",
                links=tuple(linked.get(gpu.index, ())),
                extra=_extra(gpu, smi),
            )
        )
    return devices, {gpu.id: gpu.handle for gpu in gpus}

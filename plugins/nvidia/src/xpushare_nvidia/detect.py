"""Detection: the node's NVIDIA GPUs as inventory entries.

Why here and not in the hook: detection joins several sources (NVML identity and memory,
attributes, PCI and NUMA placement with a sysfs fallback, MIG state, link topology) and must
degrade per field and per GPU. A value NVML cannot give is left out; a GPU whose identity
cannot be read is left out with a log line (research/gpustack-devices.md §2.1: never key a
device by anything but its UUID); a GPU that is *lost* stays in the inventory, unhealthy, if
it was seen before, so pods already placed on it keep their accounting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from xpushare.models import Device, PartitionProfile, TopologyLink
from xpushare_nvidia import allocate, dynamic, health, mig, modes, topology
from xpushare_nvidia.calls import is_lost, normalize_bus_id, optional, text
from xpushare_nvidia.lazy import pynvml
from xpushare_nvidia.library import GEOMETRY_KEY, INVENTORY_KEY, MIG_KEY, VENDOR

if TYPE_CHECKING:
    from xpushare_nvidia.config import NvidiaConfig
    from xpushare_nvidia.library import Nvml

log = logging.getLogger(__name__)

#: Model name when NVML returns an empty one (the inventory requires a name).
UNKNOWN_MODEL: Final = "NVIDIA GPU"


@dataclass
class _Gpu:
    index: int
    handle: Any
    uuid: str
    name: str
    memory_mib: int
    sm_count: int
    compute_capability: str | None
    bus_id: str | None
    numa: int | None
    minor: int | None
    mig: mig.MigState | None
    target: str | None = None
    geometry: tuple[dynamic.GiProfile, ...] = ()


def detect(nvml: Nvml, config: NvidiaConfig) -> list[Device]:
    """Every NVIDIA GPU NVML enumerates; NVML errors on the count itself propagate."""
    count = pynvml.nvmlDeviceGetCount()
    previous: dict[int, Device] = nvml.extra.get(INVENTORY_KEY, {})
    watcher = health.watcher(nvml)
    gpus: list[_Gpu] = []
    lost: list[Device] = []
    for index in range(count):
        try:
            gpu = _read(index, config)
        except pynvml.NVMLError as exc:
            known = previous.get(index)
            if is_lost(exc) and known is not None:
                watcher.mark_bad(known.id, f"GPU is lost ({exc})")
                lost.append(known.model_copy(update={"healthy": False}))
            else:
                log.error(
                    "vendor nvidia: GPU at NVML index %d left out of the inventory: %s. "
                    "Check it with nvidia-smi -i %d.",
                    index,
                    exc,
                    index,
                )
            continue
        if gpu is not None:
            _apply_mode(gpu, config)
            gpus.append(gpu)

    ports = [topology.GpuPort(g.uuid, g.handle, g.bus_id) for g in gpus if g.bus_id]
    try:
        links = topology.discover(ports)
    except pynvml.NVMLError as exc:
        log.warning("vendor nvidia: GPU topology unavailable this round: %s", exc)
        links = {}

    devices = [_device(g, config, nvml, links, watcher) for g in gpus]
    devices += [d for d in lost if d.id not in {g.uuid for g in gpus}]
    devices.sort(key=lambda d: d.index)
    nvml.handles = {g.uuid: g.handle for g in gpus}
    nvml.extra[MIG_KEY] = {g.uuid: g.mig for g in gpus if g.mig is not None and g.mig.enabled}
    nvml.extra[GEOMETRY_KEY] = {g.uuid: g.geometry for g in gpus if g.geometry}
    nvml.extra[INVENTORY_KEY] = {d.index: d for d in devices}
    return devices


def _read(index: int, config: NvidiaConfig) -> _Gpu | None:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    uuid = text(pynvml.nvmlDeviceGetUUID(handle))
    if not uuid:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    name = text(optional("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle) or "")
    memory = optional("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
    if memory is not None:
        memory_mib = int(memory.total) // 2**20
    elif config.preconfigured_memory_mib:
        memory_mib = config.preconfigured_memory_mib
    else:
        log.warning(
            "vendor nvidia: GPU %s (%s) reports no memory size (unified memory?); left out. "
            "Set preconfigured_memory_mib to schedule it.",
            uuid,
            name,
        )
        return None
    attributes = optional("nvmlDeviceGetAttributes", pynvml.nvmlDeviceGetAttributes, handle)
    sm_count = int(attributes.multiprocessorCount) if attributes is not None else 0
    capability = optional(
        "nvmlDeviceGetCudaComputeCapability", pynvml.nvmlDeviceGetCudaComputeCapability, handle
    )
    pci = optional("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, handle)
    bus_id = normalize_bus_id(text(pci.busId)) if pci is not None and pci.busId else None
    numa = optional("nvmlDeviceGetNumaNodeId", pynvml.nvmlDeviceGetNumaNodeId, handle)
    if numa is None or numa < 0:
        numa = _sysfs_numa(config.sysfs_root, bus_id)
    return _Gpu(
        index=index,
        handle=handle,
        uuid=uuid,
        name=name or UNKNOWN_MODEL,
        memory_mib=memory_mib,
        sm_count=sm_count,
        compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
        bus_id=bus_id,
        numa=numa,
        minor=optional("nvmlDeviceGetMinorNumber", pynvml.nvmlDeviceGetMinorNumber, handle),
        mig=mig.read(handle, sm_count),
    )


#: GPUs configured for mig mode that do not do MIG, already reported.
_warned: set[str] = set()


def _apply_mode(gpu: _Gpu, config: NvidiaConfig) -> None:
    """Switch the GPU to its configured mode if nothing runs on it; read its MIG geometry."""
    gpu.target = config.mode_of(gpu.uuid, gpu.index)
    if gpu.target is None:
        return
    if gpu.mig is None:
        if gpu.target == modes.MIG and gpu.uuid not in _warned:
            _warned.add(gpu.uuid)  # once: detection runs every detect_interval
            log.warning(
                "vendor nvidia: GPU %s (%s) is configured for mig mode but does not do MIG; it "
                "serves in hami-core mode",
                gpu.uuid,
                gpu.name,
            )
        return
    want = gpu.target == modes.MIG
    if gpu.mig.enabled != want:
        held = (
            allocate.mig_holders(config, gpu.uuid)
            if gpu.mig.enabled
            else allocate.hami_core_holders(config, gpu.uuid)
        )
        if modes.switch_mig(gpu.handle, gpu.uuid, want, held):
            gpu.mig = mig.read(gpu.handle, gpu.sm_count)
    if gpu.mig is not None and gpu.mig.enabled:
        gpu.geometry = dynamic.read_profiles(gpu.handle, config.mig_profiles)


def _sysfs_numa(sysfs_root: str, bus_id: str | None) -> int | None:
    """The kernel's NUMA node of the PCI device (-1 there means "none": reported as absent)."""
    if not bus_id:
        return None
    try:
        value = int((Path(sysfs_root) / "bus/pci/devices" / bus_id / "numa_node").read_text())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def _device(
    gpu: _Gpu,
    config: NvidiaConfig,
    nvml: Nvml,
    links: dict[str, tuple[TopologyLink, ...]],
    watcher: health.Watcher,
) -> Device:
    extra = {"driver_version": nvml.driver_version, "cuda_version": nvml.cuda_version}
    if gpu.compute_capability:
        extra["compute_capability"] = gpu.compute_capability
    if gpu.minor is not None:
        extra["minor_number"] = str(gpu.minor)
    mode, slots = mig.SHARED_MODE, config.share_slots
    if gpu.target == "exclusive":
        mode, slots = modes.EXCLUSIVE, 1
    partitions: tuple[PartitionProfile, ...] = ()
    if gpu.mig is not None:
        extra["mig_mode"] = "enabled" if gpu.mig.enabled else "disabled"
        if gpu.mig.pending != gpu.mig.enabled:
            extra["mig_mode_pending"] = "enabled" if gpu.mig.pending else "disabled"
        if gpu.mig.enabled:
            mode = mig.MIG_MODE
            if gpu.geometry:
                # Dynamic: the profiles with their placements; instances are made per pod.
                partitions = tuple(p.partition(gpu.sm_count) for p in gpu.geometry)
                slots = max(p.count for p in gpu.geometry)
                extra["mig_dynamic"] = "true"
            else:
                partitions = mig.profiles(gpu.mig, gpu.sm_count)
                slots = max(1, len(gpu.mig.instances))
            extra["mig_instances"] = ",".join(f"{i.profile}={i.uuid}" for i in gpu.mig.instances)
    if gpu.target is not None and modes.HAMI_NAME.get(mode) != gpu.target:
        extra["mode_pending"] = gpu.target
    return Device(
        vendor=VENDOR,
        id=gpu.uuid,
        index=gpu.index,
        model=gpu.name,
        memory_mib=gpu.memory_mib,
        compute_units=gpu.sm_count,
        share_slots=slots,
        numa_node=gpu.numa,
        pci_bus_id=gpu.bus_id,
        healthy=watcher.healthy(gpu.uuid),
        mode=mode,
        partitions=partitions,
        links=links.get(gpu.uuid, ()),
        extra={k: v for k, v in extra.items() if v},
    )

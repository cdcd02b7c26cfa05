"""Monitoring: device readings from NVML, per-container usage from HAMi-core's files.

Why both: NVML knows the GPU (utilization, memory, temperature, power, processes) but not
which container a share belongs to; HAMi-core's accounting file of each container knows what
that container uses of each GPU and its limit. A reading NVML cannot give is absent, never
0 (research/gpustack-devices.md §2.3); a GPU lost between two samples is reported unhealthy
with no readings instead of failing the whole sample.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xpushare.models import ContainerUsage, Device, DeviceSample, MonitorSnapshot
from xpushare_nvidia import hamicore, health
from xpushare_nvidia.allocate import CONTAINERS_DIR, META_DIR
from xpushare_nvidia.calls import is_lost, optional, running_processes
from xpushare_nvidia.journal import Journal, instance_of
from xpushare_nvidia.lazy import pynvml

if TYPE_CHECKING:
    from xpushare_nvidia.config import NvidiaConfig
    from xpushare_nvidia.library import Nvml

log = logging.getLogger(__name__)

_MIB = 2**20


def monitor(nvml: Nvml, config: NvidiaConfig, devices: Sequence[Device]) -> MonitorSnapshot:
    watcher = health.watcher(nvml)
    samples = tuple(_sample(nvml, d, watcher) for d in devices)
    containers: tuple[ContainerUsage, ...] = ()
    if config.container_usage:
        containers = tuple(container_usage(Path(config.hami_core.agent_path), devices))
        containers += tuple(mig_usage(config, devices))
    return MonitorSnapshot(devices=samples, containers=containers)


def _handle(nvml: Nvml, uuid: str) -> Any:
    handle = nvml.handles.get(uuid)
    if handle is None:
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        nvml.handles[uuid] = handle
    return handle


def _sample(nvml: Nvml, device: Device, watcher: health.Watcher) -> DeviceSample:
    try:
        handle = _handle(nvml, device.id)
        utilization = optional(
            "nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates, handle
        )
        memory = optional("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
        temperature = optional(
            "nvmlDeviceGetTemperature",
            pynvml.nvmlDeviceGetTemperature,
            handle,
            pynvml.NVML_TEMPERATURE_GPU,
        )
        power_mw = optional("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, handle)
        processes = running_processes(handle)
    except pynvml.NVMLError as exc:
        if is_lost(exc):
            watcher.mark_bad(device.id, f"GPU is lost ({exc})")
        else:
            log.warning("vendor nvidia: GPU %s could not be sampled: %s", device.id, exc)
        return DeviceSample(device_id=device.id, healthy=watcher.healthy(device.id))
    return DeviceSample(
        device_id=device.id,
        utilization_percent=float(utilization.gpu) if utilization is not None else None,
        memory_used_mib=int(memory.used) // _MIB if memory is not None else None,
        memory_total_mib=int(memory.total) // _MIB if memory is not None else None,
        temperature_c=float(temperature) if temperature is not None else None,
        power_w=power_mw / 1000 if power_mw is not None else None,
        healthy=watcher.healthy(device.id),
        process_count=len(processes) if processes is not None else None,
    )


def container_usage(hami_dir: Path, devices: Sequence[Device]) -> list[ContainerUsage]:
    """Per-container usage of *devices* from the accounting files under *hami_dir*.

    Files of containers on GPUs this node does not have (foreign or stale files) contribute
    nothing; unreadable files are logged at debug level, since a container that has not
    started CUDA yet, or one being torn down, has a partial file for a while.
    """
    known = {d.id for d in devices}
    usage: list[ContainerUsage] = []
    for found in hamicore.scan(hami_dir / CONTAINERS_DIR):
        if isinstance(found, tuple):
            log.debug("vendor nvidia: HAMi-core file skipped: %s: %s", *found)
            continue
        namespace, pod = _owner(hami_dir, found.pod_uid, found.container)
        for use in found.region.devices:
            if use.uuid not in known:
                continue
            usage.append(
                ContainerUsage(
                    device_id=use.uuid,
                    namespace=namespace,
                    pod=pod,
                    container=found.container,
                    memory_used_mib=use.used_bytes // _MIB,
                    memory_limit_mib=use.limit_bytes // _MIB if use.limit_bytes else None,
                    utilization_percent=float(use.sm_util),
                )
            )
    return usage


def mig_usage(config: NvidiaConfig, devices: Sequence[Device]) -> list[ContainerUsage]:
    """Per-container usage of the MIG instances made for containers (dynamic MIG).

    NVML reads a MIG device's memory (its utilization it does not give: absent, not 0).
    The series are the container series of the GPU the instance is on, labelled with the
    pod, summed when one container holds several instances of one GPU.
    """
    known = {d.id for d in devices}
    journal = Journal(Path(config.journal_dir))
    hami_dir = Path(config.hami_core.agent_path)
    totals: dict[tuple[str, str], list[int]] = {}
    for name in journal.names():
        for entry in journal.read(name):
            instance = instance_of(entry)
            if instance is None or instance.gpu not in known:
                continue
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(instance.uuid)
            except pynvml.NVMLError:
                continue  # destroyed between the journal's read and now
            memory = optional(
                "nvmlDeviceGetMemoryInfo(MIG)", pynvml.nvmlDeviceGetMemoryInfo, handle
            )
            if memory is None:
                continue
            found = totals.setdefault((instance.gpu, name), [0, 0])
            found[0] += int(memory.used) // _MIB
            found[1] += int(memory.total) // _MIB
    out = []
    for (gpu, name), (used, total) in sorted(totals.items()):
        uid, _, container = name.rpartition("_")
        namespace, pod = _owner(hami_dir, uid, container)
        out.append(
            ContainerUsage(
                device_id=gpu,
                namespace=namespace,
                pod=pod,
                container=container,
                memory_used_mib=used,
                memory_limit_mib=total,
            )
        )
    return out


def _owner(hami_dir: Path, pod_uid: str, container: str) -> tuple[str, str]:
    """(namespace, pod name) recorded at Allocate; the pod UID when nothing was recorded
    (e.g. a container that HAMi's own device plugin allocated before a migration)."""
    path = hami_dir / META_DIR / f"{hamicore.container_dir_name(pod_uid, container)}.json"
    try:
        data = json.loads(path.read_text())
        namespace, pod = data["namespace"], data["pod"]
    except (OSError, ValueError, KeyError, TypeError):
        return "", pod_uid
    if not isinstance(namespace, str) or not isinstance(pod, str):
        return "", pod_uid
    return namespace, pod

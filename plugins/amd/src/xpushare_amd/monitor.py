"""Monitoring: per-GPU readings from amdsmi, kept by the node agent for its metrics.

A reading amdsmi cannot give (not supported on this GPU, no permission, the wrapper's
``"N/A"``) is left ``None``: the metrics endpoint then omits it instead of reporting a zero
nobody measured (research/gpustack-devices.md §2.3). Each sample also carries the GPU's
health as :mod:`xpushare_amd.health` reads it.

Per-container usage is not reported: amdsmi lists processes with host PIDs, and mapping
them to pods needs the node's cgroup tree, which is the node agent's business, not the
vendor's. The process count per GPU is reported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xpushare.models import DeviceSample, MonitorSnapshot
from xpushare_amd.config import BYTES_PER_MIB
from xpushare_amd.health import uncorrectable_errors

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from xpushare.models import Device
    from xpushare_amd.library import Smi

#: amdsmi reports a 16-bit all-ones value for an unavailable activity or power reading.
_NA16 = 0xFFFF


def _reading(value: Any, *, limit: int = _NA16) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value >= limit:
        return None
    return value


def _temperature(smi: Smi, handle: Any) -> float | None:
    # Edge is the board sensor most GPUs have; MI300-class GPUs have none and report the
    # hotspot (junction) instead. amdsmi gives whole degrees Celsius.
    api = smi.api
    for sensor in (api.AmdSmiTemperatureType.EDGE, api.AmdSmiTemperatureType.HOTSPOT):
        value = smi.optional(
            "amdsmi_get_temp_metric", handle, sensor, api.AmdSmiTemperatureMetric.CURRENT
        )
        if isinstance(value, int) and value >= 0:
            return float(value)
    return None


def _power(smi: Smi, handle: Any) -> float | None:
    info = smi.optional("amdsmi_get_power_info", handle) or {}
    for key in ("current_socket_power", "average_socket_power"):
        value = _reading(info.get(key))
        if value is not None and value > 0:
            return float(value)
    return None


def sample(smi: Smi, device: Device, handle: Any) -> DeviceSample:
    api = smi.api
    activity = smi.optional("amdsmi_get_gpu_activity", handle) or {}
    used = smi.optional("amdsmi_get_gpu_memory_usage", handle, api.AmdSmiMemoryType.VRAM)
    processes = smi.optional("amdsmi_get_gpu_process_list", handle)
    errors = uncorrectable_errors(smi, handle)
    gfx = _reading(activity.get("gfx_activity"), limit=101)
    return DeviceSample(
        device_id=device.id,
        utilization_percent=None if gfx is None else float(gfx),
        memory_used_mib=used // BYTES_PER_MIB if isinstance(used, int) else None,
        memory_total_mib=device.memory_mib,
        temperature_c=_temperature(smi, handle),
        power_w=_power(smi, handle),
        healthy=device.healthy if errors is None else errors == 0,
        process_count=len(processes) if isinstance(processes, list) else None,
    )


def snapshot(smi: Smi, devices: Sequence[Device], handles: Mapping[str, Any]) -> MonitorSnapshot:
    """Readings for every device this process detected; others keep only their inventory."""
    samples = []
    for device in devices:
        handle = handles.get(device.id)
        if handle is None:
            samples.append(DeviceSample(device_id=device.id, healthy=device.healthy))
        else:
            samples.append(sample(smi, device, handle))
    return MonitorSnapshot(devices=tuple(samples))

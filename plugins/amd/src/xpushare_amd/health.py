"""Health: a GPU with uncorrectable memory ECC errors is unhealthy.

This is GPUStack's signal for AMD GPUs, uncorrectable errors in the UMC (memory controller)
block (research/gpustack-devices.md §2.2): such a GPU can corrupt a job's data, so no new
pod should land on it. A GPU that cannot report ECC (consumer parts) keeps the health that
detection gave it. Health is polled (amdsmi's event API is not used yet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xpushare.models import HealthEvent

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from xpushare.models import Device
    from xpushare_amd.library import Smi


def uncorrectable_errors(smi: Smi, handle: Any) -> int | None:
    """UMC uncorrectable ECC errors since boot; ``None`` where the GPU cannot tell."""
    ecc = smi.optional("amdsmi_get_gpu_ecc_count", handle, smi.api.AmdSmiGpuBlock.UMC)
    if not ecc:
        return None
    value = ecc.get("uncorrectable_count")
    return value if isinstance(value, int) else None


def health_changes(
    smi: Smi, devices: Sequence[Device], handles: Mapping[str, Any]
) -> list[HealthEvent]:
    """Devices whose ECC-based health differs from what *devices* says."""
    events = []
    for device in devices:
        handle = handles.get(device.id)
        if handle is None:
            continue
        errors = uncorrectable_errors(smi, handle)
        if errors is None:
            continue
        healthy = errors == 0
        if healthy != device.healthy:
            reason = (
                "no uncorrectable memory (UMC) ECC errors any more"
                if healthy
                else f"{errors} uncorrectable memory (UMC) ECC error(s); drain the GPU and "
                "check it with `amd-smi metric --ecc`"
            )
            events.append(HealthEvent(device_id=device.id, healthy=healthy, reason=reason))
    return events

"""Per-device checks shared by the vendors here that implement their own fit.

Why: a vendor whose placement rules the core's fit cannot express (Kunlun's topology groups,
Enflame's DRS profiles) still turns devices down for the same first reasons as the core, in
the same order: health, then the request's model and UUID constraints.
"""

from __future__ import annotations

from xpushare.models import ContainerRequest, Device, DeviceUsage, FitReason

#: The usage of a device nobody uses (the ledger leaves such devices out).
UNUSED = DeviceUsage(device_id="-")


def idle(usage: DeviceUsage) -> bool:
    """Nobody holds any share of the device."""
    return not (
        usage.used_slots or usage.used_memory_mib or usage.used_compute_percent or usage.exclusive
    )


def allowed(request: ContainerRequest, device: Device) -> FitReason | None:
    """Why *request* may not use *device* whatever its usage (health, model, UUID); or None."""
    if not device.healthy:
        return FitReason.UNHEALTHY
    model = device.model.upper()
    if request.models_include and not any(m.upper() in model for m in request.models_include):
        return FitReason.MODEL_MISMATCH
    if any(m.upper() in model for m in request.models_exclude):
        return FitReason.MODEL_MISMATCH
    if (request.uuids_include and device.id not in request.uuids_include) or (
        device.id in request.uuids_exclude
    ):
        return FitReason.UUID_MISMATCH
    return None

"""Checks on what a plugin returns: a third-party plugin is untrusted input.

Each check raises ``ValueError`` with a sentence about what is wrong; the vendor handle turns
it into a :class:`~xpushare.errors.PluginError` that names the vendor and the hook.
"""

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter

from xpushare.models import (
    AdmissionGuard,
    ContainerAllocation,
    ContainerRequest,
    Device,
    FitResult,
    HealthEvent,
    JsonPatchOp,
    MonitorSnapshot,
    NodeView,
    VendorSpec,
)

_DEVICES = TypeAdapter(tuple[Device, ...])
_EVENTS = TypeAdapter(tuple[HealthEvent, ...])
_PATCHES = TypeAdapter(tuple[JsonPatchOp, ...])
_IDS = TypeAdapter(tuple[str, ...])
_ANNOTATIONS = TypeAdapter(dict[str, str])
_RESERVED_PREFIX = "xpushare.io/"


def vendor_spec(value: Any) -> VendorSpec:
    return VendorSpec.model_validate(value)


def devices(vendor: str, value: Any) -> tuple[Device, ...]:
    found = _DEVICES.validate_python(value)
    ids: set[str] = set()
    indexes: set[int] = set()
    for device in found:
        if device.vendor != vendor:
            raise ValueError(f"device {device.id} claims vendor {device.vendor!r}")
        if device.id in ids:
            raise ValueError(f"device id {device.id} reported twice")
        if device.index in indexes:
            raise ValueError(f"device index {device.index} reported twice")
        ids.add(device.id)
        indexes.add(device.index)
    return found


def snapshot(value: Any) -> MonitorSnapshot:
    return MonitorSnapshot.model_validate(value)


def health_events(value: Any) -> tuple[HealthEvent, ...]:
    return _EVENTS.validate_python(value)


def allocation(value: Any) -> ContainerAllocation:
    return ContainerAllocation.model_validate(value)


def preferred(value: Any, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
    chosen = list(_IDS.validate_python(value))
    if len(chosen) != size or len(set(chosen)) != size:
        raise ValueError(f"preferred allocation {chosen} is not {size} distinct devices")
    if not set(must) <= set(chosen):
        raise ValueError(f"preferred allocation {chosen} leaves out required {list(must)}")
    if not set(chosen) <= set(available):
        raise ValueError(f"preferred allocation {chosen} names devices kubelet did not offer")
    return chosen


def request(vendor: str, value: Any) -> ContainerRequest:
    parsed = ContainerRequest.model_validate(value)
    if parsed.vendor != vendor:
        raise ValueError(f"request is for vendor {parsed.vendor!r}")
    return parsed


def fit(value: Any, req: ContainerRequest, node: NodeView) -> FitResult:
    result = FitResult.model_validate(value)
    if result.fits:
        known = {d.id for d in node.devices}
        picked = [s.device_id for s in result.devices]
        unknown = set(picked) - known
        if unknown:
            raise ValueError(f"fit picked devices not on node {node.name}: {sorted(unknown)}")
        if len(picked) != req.count and req.partition is None:
            raise ValueError(f"fit picked {len(picked)} devices for a request of {req.count}")
    return result


def score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"score {value!r} is not a number")
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise ValueError(f"score {number} is outside [0, 1]")
    return number


def annotations(value: Any, taken: Mapping[str, str] | None = None) -> dict[str, str]:
    result = _ANNOTATIONS.validate_python(value)
    for key in result:
        if key.startswith(_RESERVED_PREFIX):
            raise ValueError(f"annotation {key} is reserved for the xpushare core")
        if taken and key in taken:
            raise ValueError(f"annotation {key} is already set by another vendor")
    return result


def patches(value: Any) -> tuple[JsonPatchOp, ...]:
    return _PATCHES.validate_python(value)


def admission_guard(value: Any) -> AdmissionGuard:
    return AdmissionGuard.model_validate(value)

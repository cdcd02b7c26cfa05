"""HAMi's sGPU application classes (``metax-tech.com/sgpu-app-class``) in the MetaX fit.

HAMi's Metax-SGPU candidate filter (hami-protocol.md §8.2, ``checkAppClass`` in HAMi's
pkg/device/metax/sdevice.go) keeps classed and unclassed pods apart: an idle GPU takes any
pod; a GPU in use takes a pod with a class (``online`` or ``offline``) only when it already
runs a classed pod, and a pod without one only when it runs no classed pod; an ``offline``
pod never joins a GPU running an ``online`` one (MetaX suspends offline work there). HAMi
knows a GPU's classes from the annotations of the pods on it. Our fit sees only the usage
per device, so each slice of a classed pod is booked under a partition name that says its
class (:data:`CLASS_TAGS`); the ledger lists those names in ``DeviceUsage.partitions_in_use``,
one per slice, and a GPU's slots used beyond its tags are unclassed pods'.

An ``online`` pod books no compute and skips HAMi's compute checks (HAMi sets its cores to 0),
and among the GPUs that fit it prefers, as HAMi's ``prioritizeOnlineDevices`` does, GPUs
not running offline work alone, then fewer online pods, then fewer offline pods; ties keep
the placement policy's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from xpushare.models import ContainerRequest, DeviceUsage, FitReason, FitResult, NodeView
from xpushare.scheduling.fit import default_fit

ONLINE: Final = "online"
OFFLINE: Final = "offline"
#: The request mode (``ContainerRequest.mode``) a classed pod's request carries, per class.
CLASS_MODES: Final = {ONLINE: "sgpu-app-class=online", OFFLINE: "sgpu-app-class=offline"}
#: The partition name a classed slice is booked under (the same strings as the modes).
CLASS_TAGS: Final = {mode: cls for cls, mode in CLASS_MODES.items()}


def _classes(u: DeviceUsage | None) -> tuple[int, int, bool]:
    """(online slices, offline slices, any unclassed slice) on one device."""
    if u is None:
        return 0, 0, False
    online = sum(1 for p in u.partitions_in_use if p == CLASS_MODES[ONLINE])
    offline = sum(1 for p in u.partitions_in_use if p == CLASS_MODES[OFFLINE])
    return online, offline, u.used_slots > online + offline


def admits(requested: str | None, u: DeviceUsage | None) -> bool:
    """HAMi's ``checkAppClass``: may a pod of class *requested* (None: none) join this GPU."""
    online, offline, _ = _classes(u)
    if u is None or u.used_slots == 0:
        return True
    classed = online + offline > 0
    if classed != (requested is not None):
        return False
    return not (online > 0 and requested == OFFLINE)


def _online_rank(u: DeviceUsage | None) -> tuple[int, int, int]:
    online, offline, _ = _classes(u)
    only_offline = online == 0 and offline > 0
    return (1 if only_offline else 0, online, offline)


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
    memory_overcommit: float,
) -> FitResult | None:
    """The fit with HAMi's app-class rule, or ``None`` where it changes nothing."""
    requested = CLASS_TAGS.get(request.mode) if request.mode is not None else None
    if requested is None and not any(
        p in CLASS_TAGS for u in usage.values() for p in u.partitions_in_use
    ):
        return None  # no class on either side: the core's default decides alone
    allowed = [d for d in node.devices if admits(requested, usage.get(d.id))]
    refused = len(node.devices) - len(allowed)
    order = list(device_order) or [d.id for d in node.devices]
    plain = request.model_copy(update={"mode": None})
    seen = usage
    if requested == ONLINE:
        # HAMi: an online pod takes no cores and is not held back by booked compute.
        plain = plain.model_copy(update={"compute_percent": 0, "exclusive": False})
        seen = {k: u.model_copy(update={"used_compute_percent": 0}) for k, u in usage.items()}
        rank = {i: _online_rank(usage.get(i)) for i in order}
        order = sorted(order, key=lambda i: rank[i])  # stable: ties keep the policy's order
    result = default_fit(
        plain, node.model_copy(update={"devices": tuple(allowed)}), seen, order, memory_overcommit
    )
    if not refused:
        return _tagged(result, requested)
    reasons = dict(result.reasons)
    reasons.pop(FitReason.NO_DEVICES, None)  # the node has GPUs: only the class kept them
    reasons[FitReason.MODE_MISMATCH] = refused
    if result.fits:
        return _tagged(result.model_copy(update={"reasons": reasons}), requested)
    own = f"app class {requested}" if requested else "no app class"
    message = (
        f"node {node.name}: {refused} of {len(node.devices)} MetaX GPUs serve pods of another "
        f"metax-tech.com/sgpu-app-class than this pod's ({own})"
    )
    if allowed:
        message += f"; the others: {result.explain()}"
    return FitResult(fits=False, reasons=reasons, message=message)


def _tagged(result: FitResult, requested: str | None) -> FitResult:
    """*result* with each slice booked under its pod's class (nothing for no class)."""
    if not result.fits or requested is None:
        return result
    tag = CLASS_MODES[requested]
    devices = tuple(s.model_copy(update={"partition": tag}) for s in result.devices)
    return result.model_copy(update={"devices": devices})

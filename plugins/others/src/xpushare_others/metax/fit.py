"""The MetaX sGPU fit: HAMi's Metax-SGPU candidate filter on top of the core's sharing model.

HAMi checks each GPU in this order (hami-protocol.md §8.2, HAMi's pkg/device/metax/
sdevice.go ``Fit``): health, app class (:mod:`~xpushare_others.metax.app_class`), QoS
policy (:mod:`~xpushare_others.metax.qos`), UUID, slots, mutex, memory, then cores (not
for ``online`` pods). The first two are this module's, on the facts the slices' tags keep
(:mod:`~xpushare_others.metax.tags`); the rest are the core's default fit, given only the
GPUs the class and QoS admit. Each slice given out is booked under its pod's tag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xpushare.models import ContainerRequest, DeviceUsage, FitReason, FitResult, NodeView
from xpushare.scheduling.hookfit import default_fit
from xpushare_others.metax import app_class, qos
from xpushare_others.metax.tags import ONLINE, SgpuTag, parse


def request_tag(request: ContainerRequest) -> SgpuTag:
    """The class and QoS the request's pod runs under (none, best-effort when it names none)."""
    return parse(request.mode) or SgpuTag()


def _untagged(usage: Mapping[str, DeviceUsage]) -> bool:
    """Whether no device holds a slice of a classed or non-best-effort pod."""
    return not any(parse(p) is not None for u in usage.values() for p in u.partitions_in_use)


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
    memory_overcommit: float,
) -> FitResult | None:
    """The fit with HAMi's app-class and QoS rules, or ``None`` where they change nothing."""
    tag = request_tag(request)
    if tag == SgpuTag() and _untagged(usage):
        return None  # an unclassed best-effort pod among such pods: the core decides alone
    by_class = [d for d in node.devices if app_class.admits(tag.app_class, usage.get(d.id))]
    allowed = [d for d in by_class if qos.admits(request, tag, usage.get(d.id))]
    off_class = len(node.devices) - len(by_class)
    off_qos = len(by_class) - len(allowed)
    order = list(device_order) or [d.id for d in node.devices]
    plain = request.model_copy(update={"mode": None})
    seen = usage
    if tag.app_class == ONLINE:
        # HAMi: an online pod takes no cores and is not held back by booked compute.
        plain = plain.model_copy(update={"compute_percent": 0, "exclusive": False})
        seen = {k: u.model_copy(update={"used_compute_percent": 0}) for k, u in usage.items()}
        rank = {i: app_class.online_rank(usage.get(i)) for i in order}
        order = sorted(order, key=lambda i: rank[i])  # stable: ties keep the policy's order
    result = default_fit(
        plain, node.model_copy(update={"devices": tuple(allowed)}), seen, order, memory_overcommit
    )
    if not off_class and not off_qos:
        return _tagged(result, tag)
    reasons = dict(result.reasons)
    reasons.pop(FitReason.NO_DEVICES, None)  # the node has GPUs: only class or QoS kept them
    reasons[FitReason.MODE_MISMATCH] = off_class + off_qos
    if result.fits:
        return _tagged(result.model_copy(update={"reasons": reasons}), tag)
    parts = []
    if off_class:
        own = f"app class {tag.app_class}" if tag.app_class else "no app class"
        parts.append(
            f"{off_class} serve pods of another metax-tech.com/sgpu-app-class than this "
            f"pod's ({own})"
        )
    if off_qos:
        parts.append(
            f"{off_qos} run pods under another metax-tech.com/sgpu-qos-policy than this pod's "
            f"({tag.qos}); a GPU takes one policy until its pods end"
        )
    message = f"node {node.name}: of {len(node.devices)} MetaX GPUs, {'; '.join(parts)}"
    if allowed:
        message += f"; the others: {result.explain()}"
    return FitResult(fits=False, reasons=reasons, message=message)


def _tagged(result: FitResult, tag: SgpuTag) -> FitResult:
    """*result* with each slice booked under its pod's tag (nothing for the default tag).

    A pod given all of a GPU's compute keeps its policy there (HAMi clears the GPU's): no
    one shares such a GPU unless compute is over-committed.
    """
    name = tag.render()
    if not result.fits or name is None:
        return result
    devices = tuple(s.model_copy(update={"partition": name}) for s in result.devices)
    return result.model_copy(update={"devices": devices})

"""Vastai's die mode: dies of one card together, and a busy card's dies kept from mutex pods.

HAMi's Vastai ``Fit`` (hami-protocol.md §8.2, ``pkg/device/vastai/device.go``), when the node's
devices are dies (``DeviceStrategy: die``):

* every die that passes the slot checks is collected, instead of stopping at the count;
* one die: the first candidate; several: the cards with the most candidate dies first (a
  stable sort, so ties keep the walk's order), their dies taken until the count is reached;
* under ``mutex`` (an exclusive request here) a card is used by one pod at a time: an idle
  die whose card has any die in use is refused as an exclusive conflict.

Whole-card nodes have none of this and are left to the core's fit, which with a slot-only
request (:mod:`xpushare_others.common.slots`) is HAMi's slot count. ``score`` is HAMi's
``ScoreNode`` for one container: the share of the picked dies on the best-represented card.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xpushare.models import (
    ContainerRequest,
    Device,
    DeviceSlice,
    DeviceUsage,
    FitReason,
    FitResult,
    NodeView,
)
from xpushare_others.common import slots
from xpushare_others.vastai import detect


def _custom(device: Device, ours: str, hami: str) -> str | None:
    value = device.extra.get(ours)
    return value if value is not None else device.extra.get(hami)


def card_of(device: Device) -> str | None:
    """The card (HAMi's AIC) a die belongs to, from our inventory or HAMi's registration."""
    return _custom(device, detect.AIC, detect.HAMI_AIC)


def die_mode(devices: Sequence[Device]) -> bool:
    """HAMi's ``isDieMode``: the node's first device says ``die``."""
    return bool(devices) and _custom(devices[0], detect.STRATEGY, detect.HAMI_STRATEGY) == "die"


def _ordered(devices: Sequence[Device], device_order: Sequence[str]) -> list[Device]:
    by_id = {d.id: d for d in devices}
    out = [by_id[i] for i in dict.fromkeys(device_order) if i in by_id]
    seen = {d.id for d in out}
    return out + [d for d in devices if d.id not in seen]


def best_combination(count: int, candidates: Sequence[Device]) -> list[Device]:
    """*count* dies, from the cards with the most candidate dies first (HAMi's rule)."""
    groups: dict[str, list[Device]] = {}
    for d in candidates:
        card = card_of(d)
        if card is not None:
            groups.setdefault(card, []).append(d)
    picked: list[Device] = []
    for group in sorted(groups.values(), key=len, reverse=True):
        for d in group:
            picked.append(d)
            if len(picked) == count:
                return picked
    return picked


def fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
) -> FitResult | None:
    """Die mode as HAMi fits it; ``None`` (the core's fit) on a whole-card node."""
    if not die_mode(node.devices):
        return None
    devices = _ordered(node.devices, device_order)
    busy_cards: set[str] = set()
    if request.exclusive:
        for d in devices:
            u = usage.get(d.id)
            card = card_of(d)
            if u is not None and u.used_slots > 0 and card is not None:
                busy_cards.add(card)
    reasons: dict[FitReason, int] = {}
    candidates: list[Device] = []
    for d in devices:
        why = slots.check(request, d, usage)
        if why is None and request.exclusive and card_of(d) in busy_cards:
            why = FitReason.EXCLUSIVE_CONFLICT
        if why is not None:
            reasons[why] = reasons.get(why, 0) + 1
        else:
            candidates.append(d)
    if request.count > len(devices):
        reasons[FitReason.TOO_FEW_DEVICES] = 1
        return FitResult(fits=False, reasons=reasons)
    if len(candidates) < request.count:
        reasons[FitReason.NOT_ENOUGH_FIT] = 1
        return FitResult(fits=False, reasons=reasons)
    picked = candidates[:1] if request.count == 1 else best_combination(request.count, candidates)
    if len(picked) < request.count:  # dies without a card cannot be combined (HAMi's rule)
        reasons[FitReason.NOT_ENOUGH_FIT] = 1
        return FitResult(fits=False, reasons=reasons)
    return FitResult(
        fits=True,
        devices=tuple(
            DeviceSlice(
                device_id=d.id,
                index=d.index,
                memory_mib=0,
                compute_percent=100 if request.exclusive else 0,
                exclusive=request.exclusive,
            )
            for d in picked
        ),
        reasons=reasons,
    )


def score(node: NodeView, result: FitResult) -> float | None:
    """Share of the picked dies on their best-represented card; None off die mode."""
    if not result.fits or not result.devices or not die_mode(node.devices):
        return None
    by_id = {d.id: d for d in node.devices}
    counts: dict[str, int] = {}
    for s in result.devices:
        device = by_id.get(s.device_id)
        card = card_of(device) if device is not None else None
        if card is None:
            return 0.0  # HAMi scores a die without a card 0
        counts[card] = counts.get(card, 0) + 1
    return max(counts.values()) / len(result.devices)

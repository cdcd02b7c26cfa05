"""Vastai detection: VAML's cards and their dies, as whole cards or one device per die.

Identities: VAML 1.0 reports no UUID, so a die is ``<card>-<die>`` (card and die indices, the
form HAMi's Vastai vectors use, e.g. ``7-0``) and a card is ``<card>``. Each die also has a
node number, its position among all dies of the node, which names its device nodes
(``/dev/vacc<N>``, ``/dev/va<N>_ctl``, ``/dev/va_video<N>``) and what Vastai's runtime is told.
Assumption: the driver numbers those nodes in VAML's card-then-die order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from xpushare.models import Device
from xpushare_others.vastai.config import HAMI_TYPE, VENDOR, VastaiConfig
from xpushare_others.vastai.library import Vaml, VamlError

log = logging.getLogger(__name__)

MIB: Final = 1024 * 1024
#: Most dies one card carries (VA16 has four; far above any Vastai product), a bound on the
#: loop over what the library says.
MAX_DIES_PER_CARD: Final = 64
#: Most cards one node holds (a bound on the loop over what the library says).
MAX_CARDS: Final = 256

#: Keys of ``Device.extra`` the fit reads: the card of a die, HAMi's names for the same
#: (``custominfo`` of HAMi's registration, decoded by the core under ``hami.custominfo.``).
AIC: Final = "aic"
STRATEGY: Final = "strategy"
HAMI_AIC: Final = "hami.custominfo.AIC"
HAMI_STRATEGY: Final = "hami.custominfo.DeviceStrategy"
#: The die node numbers of a device, comma-separated.
NODES: Final = "nodes"


@dataclass(frozen=True)
class Die:
    card: int
    index: int
    node: int
    handle: int
    memory_mib: int | None  # None: VAML could not read it (the die is then unhealthy)


def dies(vaml: Vaml) -> list[Die]:
    """Every die of every card, in VAML's order, with its node number."""
    out: list[Die] = []
    cards = vaml.card_count()
    if cards > MAX_CARDS:
        raise RuntimeError(
            f"Vastai VAML reports {cards} cards, above {MAX_CARDS}: the library is broken or "
            "not Vastai's; check `vasmi` on the node"
        )
    node = 0
    for c in range(cards):
        card = vaml.card(c)
        count = vaml.die_count(card, c)
        if count > MAX_DIES_PER_CARD:
            raise RuntimeError(
                f"Vastai VAML reports {count} dies on card {c}, above {MAX_DIES_PER_CARD}: "
                "the library is broken; check `vasmi` on the node"
            )
        for i in range(count):
            where = f"die {i} of card {c}"
            handle = vaml.die(card, i, where)
            try:
                memory: int | None = vaml.memory(handle, where).total // MIB
            except VamlError as exc:
                log.warning("vendor vastai: %s", exc)
                memory = None
            out.append(Die(card=c, index=i, node=node, handle=handle, memory_mib=memory))
            node += 1
    return out


def detect(vaml: Vaml, config: VastaiConfig) -> list[Device]:
    found = dies(vaml)
    base = {"vaml_version": vaml.version} if vaml.version else {}
    if config.device_strategy == "die":
        return [
            Device(
                vendor=VENDOR,
                id=f"{d.card}-{d.index}",
                index=d.node,
                model=HAMI_TYPE,
                memory_mib=d.memory_mib or 0,
                share_slots=config.share_slots,
                healthy=d.memory_mib is not None,
                extra={**base, AIC: str(d.card), STRATEGY: "die", NODES: str(d.node)},
            )
            for d in found
        ]
    cards: dict[int, list[Die]] = {}
    for d in found:
        cards.setdefault(d.card, []).append(d)
    return [
        Device(
            vendor=VENDOR,
            id=str(card),
            index=card,
            model=HAMI_TYPE,
            memory_mib=sum(d.memory_mib or 0 for d in group),
            share_slots=config.share_slots,
            healthy=all(d.memory_mib is not None for d in group),
            extra={
                **base,
                AIC: str(card),
                STRATEGY: "card",
                NODES: ",".join(str(d.node) for d in group),
            },
        )
        for card, group in cards.items()
    ]


def node_numbers(device: Device) -> list[int]:
    """The die node numbers of *device* (from its inventory entry)."""
    raw = device.extra.get(NODES, "")
    return [int(p) for p in raw.split(",") if p.strip().isdigit()]

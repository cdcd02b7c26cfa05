"""How a MetaX pod's sGPU app class and QoS policy travel to the fit and stay on its slices.

HAMi decides a MetaX sGPU placement by facts of the pods already on a GPU: their app class
(``metax-tech.com/sgpu-app-class``) and their QoS policy (``metax-tech.com/sgpu-qos-policy``)
(hami-protocol.md §8.2). The vendor fit sees a request and the usage per device, no pods, so:

* a request carries its pod's class and QoS in ``ContainerRequest.mode``;
* each slice the fit gives out is booked under a partition name saying the same, and the
  ledger lists those names in ``DeviceUsage.partitions_in_use``, one per slice, rebuilt from
  the assignments after a restart like the rest of the usage.

Both are one string: comma-separated ``sgpu-app-class=<class>`` and ``sgpu-qos=<policy>``
tokens. ``best-effort``, HAMi's default QoS, is never written, so a request or slice without
a QoS token is best-effort: a pod without a class and with the default policy needs no mode
(the core's fit decides for it wherever no GPU holds anything else), and slices booked before
QoS was recorded, or by HAMi, read as best-effort. An ``online`` pod carries no QoS (HAMi
neither defaults nor checks one for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ONLINE: Final = "online"
OFFLINE: Final = "offline"
APP_CLASSES: Final = (ONLINE, OFFLINE)
BEST_EFFORT: Final = "best-effort"
QOS_POLICIES: Final = (BEST_EFFORT, "fixed-share", "burst-share")

CLASS_TOKEN: Final = "sgpu-app-class="
QOS_TOKEN: Final = "sgpu-qos="


@dataclass(frozen=True, slots=True)
class SgpuTag:
    """A pod's app class (``None``: none) and QoS policy, as a request or a slice carries it."""

    app_class: str | None = None
    qos: str = BEST_EFFORT

    def render(self) -> str | None:
        """The mode or partition name; ``None`` for an unclassed best-effort pod."""
        tokens = []
        if self.app_class is not None:
            tokens.append(CLASS_TOKEN + self.app_class)
        if self.qos != BEST_EFFORT and self.app_class != ONLINE:
            tokens.append(QOS_TOKEN + self.qos)
        return ",".join(tokens) or None


#: Longest name read: the longest tag, ``sgpu-app-class=offline,sgpu-qos=fixed-share``, has
#: 44 characters (and ``ContainerRequest.mode`` holds at most 64).
MAX_TAG_CHARS: Final = 64
#: Parsed names, by name: a node's usage repeats a handful of names on every /filter call.
_PARSED: dict[str, SgpuTag | None] = {}
#: Distinct names kept; the grammar allows 2 x 3 x 3 of them, the rest are not ours.
_PARSED_MAX: Final = 256


def parse(text: str | None) -> SgpuTag | None:
    """The tag *text* writes, or ``None`` when it is not one (no text, another vendor's mode
    or profile name); never raises."""
    if text is None or len(text) > MAX_TAG_CHARS:
        return None
    hit = _PARSED.get(text, False)
    if hit is not False:
        return hit  # type: ignore[return-value]
    found: SgpuTag | None = None
    app: str | None = None
    qos = BEST_EFFORT
    ok = True
    for token in text.split(","):
        if token.startswith(CLASS_TOKEN) and token[len(CLASS_TOKEN) :] in APP_CLASSES:
            app = token[len(CLASS_TOKEN) :]
        elif token.startswith(QOS_TOKEN) and token[len(QOS_TOKEN) :] in QOS_POLICIES:
            qos = token[len(QOS_TOKEN) :]
        else:
            ok = False
            break
    if ok:
        found = SgpuTag(app, BEST_EFFORT if app == ONLINE else qos)
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[text] = found
    return found


def slice_tags(partitions: tuple[str, ...]) -> list[SgpuTag]:
    """The tags among a device's booked partition names (other names left out)."""
    out = []
    for name in partitions:
        tag = parse(name)
        if tag is not None:
            out.append(tag)
    return out

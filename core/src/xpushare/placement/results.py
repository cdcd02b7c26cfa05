"""What the placement engine answers: a node's verdict, its score key, and the results of
the extender's calls (which nodes fit and why not, where a pod goes).

A verdict is a plain tuple, not an object: the engine keeps one per node and request
shape (millions over a trace replay), and nodes in one state share the same tuple, so the
ranking can work per distinct verdict (by identity) rather than per node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from xpushare.models import PodAssignment

#: A node's score key: compared element by element, higher is better.
Score = tuple[float, ...]
#: A node's answer for a request: ``(True, score key, None)`` when the pod fits, else
#: ``(False, why, main reason)``, where *why* is a :class:`~xpushare.scheduling.PodFit`
#: (its message is built when someone reads it) or a message.
Verdict = tuple[bool, Any, Any]
#: The key of a node that fits but that the policy could not score: below every score.
LOWEST: Score = (float("-inf"),)

#: Node message when the ledger has never heard of a node.
UNKNOWN_NODE = "node unknown to xpushare (no inventory registered by its node agent)"

_NINES = (9,) * 16  # digits kept, for map(round, ...) over a key's elements


def score_key(value: float | Sequence[float]) -> Score:
    """A policy's score as a key; floats are rounded so equal sums compare equal.

    Asked once per node state a pod shape meets (a cold fill: hundreds). ``round(x, 9)``
    costs ~0.35 µs (a decimal conversion), so an int, which it would give back unchanged
    as a float (FGD's integer score), is only converted.
    """
    if isinstance(value, int | float):
        return (float(value) if type(value) is int else round(float(value), 9),)
    if type(value) is tuple and len(value) == 3:  # fgd-cpu's key, once per node state
        a, b, c = value
        return (
            float(a) if type(a) is int else round(float(a), 9),
            round(float(b), 9),
            round(float(c), 9),
        )
    return tuple(map(round, map(float, value), _NINES))


class NoFit(ValueError):
    """The pod does not fit the node it was meant for; the message says why."""


@dataclass(slots=True)
class FilterResult:
    """Which candidate nodes fit a pod, and why each other one does not."""

    fits: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def tally(self) -> Counter[str]:
        """How many nodes failed for each reason."""
        return Counter(self.failed.values())

    def explain(self, limit: int = 5) -> str:
        """'0/3 nodes fit: 2 x <reason>; 1 x <reason>', for an event or a log line."""
        total = len(self.fits) + len(self.failed)
        parts = [f"{n} x {why}" for why, n in self.tally().most_common(limit)]
        head = f"{len(self.fits)}/{total} nodes fit"
        return f"{head}: {'; '.join(parts)}" if parts else head


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a pod goes: the node, its score, and the devices per container."""

    node: str
    score: float
    assignment: PodAssignment


__all__ = [
    "LOWEST",
    "UNKNOWN_NODE",
    "Decision",
    "FilterResult",
    "NoFit",
    "Score",
    "Verdict",
    "score_key",
]

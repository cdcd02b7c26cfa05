"""HAMi's NUMA binding, as one rule every fit walks with.

A container that asks for its devices on one NUMA node (``<domain>/numa-bind``) gets, in
HAMi, the first *run* of devices of one NUMA node in the walk's order that holds enough
fitting ones: the picks restart wherever the NUMA node changes (research/hami-protocol.md
§5.1 check 4), and the picks so dropped are what HAMi's ``NumaNotFit`` counts. A device
refused by a check HAMi makes before that one (health, cordon, model) is skipped without
starting or breaking a run. The core's default fit and the vendors' own fits use this one
class, so a HAMi user's pod lands on the same devices whichever decides.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from xpushare.models import FitReason

T = TypeVar("T")

#: The checks HAMi's fit makes before its NUMA check: a device failing one of them neither
#: starts nor breaks a run (hami-protocol.md §5.1 checks 1-3).
BEFORE_NUMA = frozenset({FitReason.UNHEALTHY, FitReason.CORDONED, FitReason.MODEL_MISMATCH})


class NumaRun(Generic[T]):
    """The picks of one NUMA-bound demand of *count* devices, walked device by device."""

    __slots__ = ("_numa", "count", "discarded", "picks")

    def __init__(self, count: int) -> None:
        self.count = count
        #: The picks of the current run (one NUMA node).
        self.picks: list[T] = []
        #: Picks dropped at NUMA changes (HAMi's ``NumaNotFit``).
        self.discarded = 0
        self._numa = -1  # HAMi's prevnuma: no node met yet

    def meet(self, numa: int | None) -> None:
        """A device of NUMA node *numa* is walked (past :data:`BEFORE_NUMA`'s checks): a
        node other than the run's drops the run's picks. An unknown node is 0, as HAMi
        registers it."""
        node = numa if numa is not None and numa > 0 else 0
        if node != self._numa:
            self.discarded += len(self.picks)
            self.picks = []
            self._numa = node

    def add(self, pick: T) -> bool:
        """Take *pick* (a device of the node last met); whether the run now holds enough."""
        self.picks.append(pick)
        return len(self.picks) >= self.count

    def split(self) -> bool:
        """Whether enough devices fit, but no run of one NUMA node held enough of them."""
        return self.discarded + len(self.picks) >= self.count

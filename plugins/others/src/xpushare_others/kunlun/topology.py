"""Kunlun's topology groups on an 8-XPU board: which XPUs a container gets, and the score.

HAMi's rules (hami-protocol.md §8.2, ``pkg/device/kunlun/topo.go``), restated over positions
0-7 of a board. A board has two halves, 0-3 and 4-7, each fully linked inside; across them
XPU *i* is linked to *i + 4*. A container gets 1, 2, 4 or 8 XPUs:

* 8: the whole board, only when all eight are free;
* 1, 2 or 4 that fit in one half: the half whose free count is the best fit, tried in the
  order 1, 3, 2, 4 free for one XPU (an odd half is broken before an even one, so pairs
  survive) and count, count + 1, ... 4 otherwise; the lowest free XPUs of that half;
* otherwise 2: a cross pair *i*, *i + 4*, lowest *i* first;
* otherwise 4: a linked quad across the halves (0-1-4-5, 2-3-6-7, 0-2-4-6, 1-3-5-7, 0-3-4-7,
  1-2-5-6, in this order) among 4 or 5 free XPUs; among 6, a quad that leaves the other two
  linked to each other, else the last quad that fits.

The score (HAMi's ``calcscore``) compares the "bubbles" of the board before and of the pod's
own XPUs: a half with all four busy costs 0, a half with one costs 2, any other count 1; a set
with no XPU counts 1. Fewer bubbles than before scores best.

Positions are device indices modulo 8, boards are indices divided by 8 (HAMi knows one board
of exactly eight; a node with fewer has its missing positions never free, one with more is
placed board by board).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Final

#: XPUs on one board, and in one half of it (HAMi's 8-device layouts).
BOARD: Final = 8
HALF: Final = 4
#: Counts one container may ask of a board.
COUNTS: Final = (1, 2, 4, 8)
#: The order in which a half's free count is preferred for one XPU (HAMi's oddorder).
ODD_ORDER: Final = (1, 3, 2, 4)
#: Pairs linked across the halves (InterGroupConnection).
CROSS_PAIRS: Final = ((0, 4), (1, 5), (2, 6), (3, 7))
#: Pairs linked inside a half (GroupConnection).
HALF_PAIRS: Final = (
    (0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3),
    (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7),
)  # fmt: skip
#: Linked quads across the halves, in HAMi's order (InterGroupConnection2).
QUADS: Final = ((0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7), (0, 3, 4, 7), (1, 2, 5, 6))
#: HAMi's scores for a change of bubbles of -1, 0, +1, +2 (anything else scores as +1).
_SCORES: Final = {-1: 3000, 0: 2000, 1: 1000, 2: 0}
#: The best score, to bring HAMi's scale to [0, 1].
BEST_SCORE: Final = 3000


def _half_pick(free: Sequence[int], lower: bool, count: int) -> list[int]:
    return [p for p in free if (p < HALF) == lower][:count]


def _cross(free: Collection[int], count: int) -> list[int] | None:
    if count == 2:
        for a, b in CROSS_PAIRS:
            if a in free and b in free:
                return [a, b]
        return None
    if count != 4 or len(free) < 4 or len(free) > 6:
        return None
    fitting = [q for q in QUADS if set(q) <= set(free)]
    if not fitting:
        return None
    if len(free) < 6:
        return list(fitting[0])
    linked = {frozenset(p) for p in (*CROSS_PAIRS, *HALF_PAIRS)}
    for quad in fitting:
        if frozenset(set(free) - set(quad)) in linked:
            return list(quad)
    return list(fitting[-1])


def select(free: Iterable[int], count: int) -> list[int] | None:
    """The positions (0-7) of one board a container of *count* XPUs gets; None if none."""
    ordered = sorted({p for p in free if 0 <= p < BOARD})
    lower = sum(1 for p in ordered if p < HALF)
    upper = len(ordered) - lower
    if count == BOARD:
        return ordered if len(ordered) == BOARD else None
    if count not in COUNTS:
        return None
    if lower >= count or upper >= count:
        for slots in range(count, HALF + 1):
            wanted = ODD_ORDER[slots - 1] if count % 2 else slots
            if lower == wanted:
                return _half_pick(ordered, True, count)
            if upper == wanted:
                return _half_pick(ordered, False, count)
    return _cross(ordered, count)


def _bubbles(positions: Collection[int]) -> int:
    if not positions:
        return 1
    lower = sum(1 for p in positions if p % BOARD < HALF)
    upper = len(positions) - lower

    def cost(n: int) -> int:
        return 0 if n == HALF else 2 if n == 1 else 1

    return cost(lower) + cost(upper)


def score(busy: Collection[int], chosen: Collection[int]) -> float:
    """HAMi's node score for a pod taking *chosen* where *busy* were in use, in [0, 1]."""
    change = _bubbles(set(chosen)) - _bubbles(set(busy))
    return _SCORES.get(change, 1000) / BEST_SCORE

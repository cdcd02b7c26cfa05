"""From verdicts to a ranking: score keys with the policy's tie-break where it decides,
scaled to the extender's [0, 100], and the best node picked.

Nodes in one state share their verdict (the same tuple), so the ranking works per distinct
verdict, by identity: a few hundred at 5,000 nodes, and one lookup per node.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from xpushare.placement.results import Score, Verdict, score_key
from xpushare.scheduling import Policy

if TYPE_CHECKING:
    import numpy as np

    from xpushare.placement.memo import MemoKeys
    from xpushare.scheduling import PodRequest, UsageLedger
    from xpushare.scheduling.state import NodeState

_T = TypeVar("_T")

#: A float per node (numpy's, imported where it is used: the simulator may never need it).
FloatArray: TypeAlias = "np.ndarray[Any, np.dtype[np.float64]]"

#: Bound of the tie-breaks kept per (node state, request shape), as the fit answers per
#: state are bounded (fill.MAX_STATE_ANSWERS): a tie-break is a short tuple, and only the
#: states tied at the top are asked.
MAX_TIEBREAKS = 8_192


class Ranker:
    """Ranks verdicts for one policy; ``tie_break``: ``first`` or ``random`` (seeded)."""

    def __init__(
        self,
        ledger: UsageLedger,
        policy: Policy,
        keys: MemoKeys,
        *,
        tie_break: str,
        seed: int | None,
    ) -> None:
        self.ledger = ledger
        self.policy = policy
        self.keys = keys
        self.tie_break = tie_break
        #: Whether the policy breaks ties of its score itself (``Policy.tiebreak``).
        self.tiebreaks = type(policy).tiebreak is not Policy.tiebreak
        self._by_state: dict[tuple[int, tuple[int, int]], Score] = {}
        self._rng = random.Random(seed)

    def keys_by_verdict(
        self, request: PodRequest, names: list[str], verdicts: list[Verdict]
    ) -> dict[int, Score]:
        """The key of each fitting verdict, by the verdict's identity.

        The policy's tie-break is computed only where it decides: for the distinct verdicts
        tied at the top, which spares its cost everywhere else.
        """
        distinct = dict(zip(map(id, verdicts), verdicts, strict=True))
        keys: dict[int, Score] = {i: v[1] for i, v in distinct.items() if v[0]}
        if not self.tiebreaks or len(keys) < 2:
            return keys
        best = max(keys.values())
        top = [i for i, k in keys.items() if k == best]
        if len(top) > 1:
            nodes = self.ledger.nodes
            named = dict(zip(map(id, verdicts), names, strict=True))
            for i in top:
                state = nodes.get(named[i])
                if state is not None:
                    keys[i] = best + self.tiebreak(state, request)
        return keys

    def scaled_array(
        self, request: PodRequest, names: list[str], verdicts: list[Verdict]
    ) -> FloatArray:
        """Each verdict's key scaled as :func:`scale` does (-1: it does not fit), in an array.

        Why on arrays: at 5,000 candidates the distinct verdicts by identity, then each
        node's scaled key looked up by identity, were two passes of a dict operation per
        node, a quarter of /filter's time with its shortlist (py-spy in bench_throughput,
        2026-12-06). Here the identities are sorted in numpy, the distinct verdicts (a few
        hundred) keyed and scaled in Python, and spread back to the nodes by index.
        """
        import numpy  # imported at start off the loop (scheduler/preload.py)

        count = len(verdicts)
        ids = numpy.fromiter(map(id, verdicts), dtype=numpy.intp, count=count)
        _, first, inverse = numpy.unique(ids, return_index=True, return_inverse=True)
        at = first.tolist()
        distinct = [verdicts[i] for i in at]
        keys = self.keys_by_verdict(request, [names[i] for i in at], distinct)
        scaled = scale(keys)
        values = numpy.array([scaled.get(id(v), -1.0) for v in distinct], dtype=numpy.float64)
        out: FloatArray = values[inverse.reshape(count)]
        return out

    def tiebreak(self, state: NodeState, request: PodRequest) -> Score:
        """The policy's tie-break of *state* for *request*: kept in the node's memo, and
        per state where it depends on the state alone."""
        memo_keys = self.keys
        key = (memo_keys.key(request), 1)
        found: Score | None = state.memo.get(key)
        if found is not None:
            return found
        shared = memo_keys.pure and memo_keys.shareable(request)
        skey = (state.state_id(), key) if shared else None
        if skey is not None:
            found = self._by_state.get(skey)
        if found is None:
            found = score_key(self.policy.tiebreak(state, request))
            if skey is not None:
                if len(self._by_state) >= MAX_TIEBREAKS:
                    self._by_state.clear()
                self._by_state[skey] = found
        state.remember(key, found)
        return found

    def choose(self, request: PodRequest, top: list[NodeState]) -> str | None:
        """The node among *top* (equally scored, in the ledger's order) the pod goes to:
        the policy's tie-break, then the first or one at random."""
        if not top:
            return None
        if len(top) > 1 and self.tiebreaks:
            keys = [self.tiebreak(state, request) for state in top]
            best_key = max(keys)
            top = [state for state, k in zip(top, keys, strict=True) if k == best_key]
        if len(top) > 1 and self.tie_break == "random":
            return self._rng.choice(top).name
        return top[0].name

    def pick_best(self, scored: Iterable[tuple[str, Score]]) -> str | None:
        """The highest key; among equal keys the first, or one at random (seeded)."""
        items = list(scored)
        if not items:
            return None
        best = max(k for _, k in items)
        top = [name for name, k in items if k == best]
        if len(top) > 1 and self.tie_break == "random":
            return self._rng.choice(top)
        return top[0]


def scale(raw: Mapping[Any, Score]) -> dict[Any, float]:
    """Keys scaled to [0, 100]: the best 100, the others in [0, 99] by their first element,
    so a node second only on a tie-break criterion still scores below the best."""
    if not raw:
        return {}
    keys = set(raw.values())
    best = max(keys)
    firsts = [k[0] for k in keys if k[0] != float("-inf")]
    low, high = (min(firsts), max(firsts)) if firsts else (0.0, 0.0)
    span = (high - low) or 1.0
    scaled: dict[Score, float] = {}
    for key in keys:
        if key == best:
            scaled[key] = 100.0
        elif key[0] == float("-inf"):
            scaled[key] = 0.0
        else:
            scaled[key] = min(99.0, 99.0 * (key[0] - low) / span)
    return {name: scaled[key] for name, key in raw.items()}


def by_name(names: list[str], verdicts: list[Verdict], values: Mapping[int, _T]) -> dict[str, _T]:
    """Per node name, the value of its verdict (by identity); nodes without one left out."""
    return {
        n: x
        for n, x in zip(names, map(values.get, map(id, verdicts)), strict=True)
        if x is not None
    }


__all__ = ["MAX_TIEBREAKS", "FloatArray", "Ranker", "by_name", "scale"]

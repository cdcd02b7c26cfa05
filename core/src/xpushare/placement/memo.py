"""Memo keys: the small int a request shape's answers are kept under, and how widely.

Why a key: hashing a request's nested key tuple on every node lookup costs more than the
rest of a cached lookup, so each (policy generation, request shape) gets one int, unique in
the process and never reused; a new workload generation (the policy learned a shape) gets
new keys, so an answer never outlives the policy state it was scored under.

Why per key, how widely an answer is kept (:class:`MemoKeys.share`, ``core_reads``): an
answer that depends on the node's state alone is kept once per state and shared by every
node in it (``NodeState.shared``); one that a vendor's own fit may decide is the node's own
(``NodeState.memo``), except on nodes where every such fit leaves the decision to the core
(marked, :func:`core_mark_of`).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Container

    from xpushare.scheduling import PodRequest, Policy

#: Memo keys, one a (placer or policy, request shape), unique in the process: positive here,
#: negative in the fragmentation policies' memos (scheduling/fragmentation.py).
_memo_ids = itertools.count(1)

#: Request kinds (per policy generation) a placer keeps a memo key for, a few hundred
#: bytes each. Keys are never reused: past the bound the table is emptied, and the answers
#: kept under the old keys age out of the node memos (``NodeState.memo_limit``).
MAX_MEMO_KEYS = 4_096

#: Bound of the core marks kept (one per set of vendor names; a process has one or two, a
#: test suite that builds many plugin hosts more).
MAX_CORE_MARKS = 64

#: One marker per set of vendor names (``NodeState.core_mark``).
_CORE_MARKS: dict[frozenset[str], object] = {}
#: A mark no node carries (a node's ``core_mark`` starts as ``None``).
UNMARKED = object()


def core_mark_of(vendors: frozenset[str]) -> object:
    """The mark left on nodes where the core's fit decides for every one of *vendors* (the
    vendors with a fit of their own): one object per set, so placers of one plugin host
    (the per-pod policies' variants) read each other's marks."""
    found = _CORE_MARKS.get(vendors)
    if found is None:
        if len(_CORE_MARKS) >= MAX_CORE_MARKS:
            _CORE_MARKS.clear()
        found = _CORE_MARKS[vendors] = object()
    return found


class MemoKeys:
    """Per (policy generation, request shape): its memo key, and where its answers live.

    ``custom``: the vendors with a fit of their own. ``topology``: HAMi's topology-aware
    GPU policy is in effect (the vendors' fits are asked on every node then).
    """

    def __init__(self, policy: Policy, custom: Container[str], *, topology: bool) -> None:
        self.policy = policy
        self.custom = custom
        self.topology = topology
        #: Whether the policy's score depends on the node's state alone.
        self.pure = bool(getattr(policy, "state_pure", False))
        self.keys: dict[tuple[Any, ...], int] = {}
        #: Per key: whether its answers depend on the node's state alone.
        self.share: dict[int, bool] = {}
        #: Per key not shared: whether nodes the vendors' own fits all leave to the core's
        #: (``NodeState.core_mark``) read their verdict from their state's shared answers.
        self.core_reads: dict[int, bool] = {}
        #: Keys made so far: a caller that sees it move knows no node has an answer yet.
        self.made = 0
        self._last_request: PodRequest | None = None
        self._last_key = 0
        self._last_generation = -1

    def key(self, request: PodRequest) -> int:
        """The memo key of *request* under the policy's current generation."""
        generation = self.policy.generation
        if request is self._last_request and generation == self._last_generation:
            return self._last_key
        full = (generation, request.key)
        key = self.keys.get(full)
        if key is None:
            if len(self.keys) >= MAX_MEMO_KEYS:
                self.keys.clear()
                self.share.clear()
                self.core_reads.clear()
            key = self.keys[full] = next(_memo_ids)
            self.made += 1
            share = self.share[key] = self.pure and self.shareable(request)
            self.core_reads[key] = not share and self.pure and self.core_decides_somewhere(request)
        self._last_request, self._last_key = request, key
        self._last_generation = generation
        return key

    def shareable(self, request: PodRequest) -> bool:
        """Whether a verdict may be shared by nodes whose device tables look the same.

        Not when a vendor's own fit decides (it may look at anything) or when the request
        names device UUIDs (the table signature leaves them out).
        """
        custom = self.custom
        return not any(
            d.include_uuids or d.exclude_uuids or d.vendor in custom for d in request.demands
        )

    def core_decides_somewhere(self, request: PodRequest) -> bool:
        """Whether a request not shared for its vendor's own fit may still be, on the nodes
        where that fit leaves the decision to the core's (``xpushare_fit_applies``): no UUIDs
        (the signatures leave them out), no partition or mode and no topology-aware policy
        (the vendor's fit is asked everywhere then, vendorfit.VendorFits.fitter)."""
        return not self.topology and not any(
            d.include_uuids or d.exclude_uuids or d.partition is not None or d.mode is not None
            for d in request.demands
        )


__all__ = ["MAX_MEMO_KEYS", "UNMARKED", "MemoKeys", "core_mark_of"]

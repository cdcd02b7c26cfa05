"""Which nodes changed, and when: the ledger's clock, and the fresh answers a node that
changed starts with.

Readers keep answers about nodes (the placement engine's verdicts, the scheduler's
candidate rows, /filter's verdicts reused by /prioritize); this is how they learn that an
answer is stale: every change gives the node a fresh memo and its new state's shared
answers, moves the clock, and is logged by name.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from xpushare.scheduling.state import NodeState

#: Node states whose shared answers the ledger keeps (each a dict of at most ``memo_limit``
#: answers, mostly pointers to answers shared further: at the scheduler's 64, some 40 MB at
#: the bound): a simulator replay passes through some 10,000, a cluster's extender through
#: fewer at a time.
MAX_SHARED_STATES = 20_000
#: Node changes remembered by name (:meth:`NodeChanges.changed_since`). A reader patches
#: answers it took a moment ago (/filter's, reused by the /prioritize that follows it, some
#: milliseconds later): at 300 pods/s about four changes land in between (a reservation and
#: three watch events a pod), so 256 leaves room for a burst of node updates; past it the
#: reader asks everything again.
CHANGE_LOG = 256


class NodeChanges:
    """The clock of node changes, their log, and the shared answers per node state."""

    def __init__(self) -> None:
        self.clock = 0
        #: The nodes of the last CHANGE_LOG clock ticks, one name per tick.
        self._log: deque[str] = deque(maxlen=CHANGE_LOG)
        self._shared: dict[int, dict[Any, Any]] = {}
        #: Names of the nodes changed since :meth:`take` was last called; ``None`` until
        #: :meth:`track` (bounded by the fleet: a set of node names).
        self._changed: set[str] | None = None

    def changed_since(self, clock: int) -> set[str] | None:
        """The names of the nodes added, changed or removed since :attr:`clock` read
        *clock*; ``None`` when more changed than the log keeps (ask everything again)."""
        ticks = self.clock - clock
        if ticks <= 0:
            return set()
        if ticks > len(self._log):
            return None
        return set(islice(reversed(self._log), ticks))

    def track(self, names: Iterable[str]) -> None:
        """Start recording which nodes change, *names* counting as changed."""
        self._changed = set(names)

    def take(self) -> set[str]:
        """The nodes added, changed or removed since the last call (and forget them)."""
        changed = self._changed
        if changed is None:
            raise RuntimeError("UsageLedger.take_changes before track_changes")
        self._changed = set()
        return changed

    def removed(self, name: str) -> None:
        """Node *name* is gone."""
        if self._changed is not None:
            self._changed.add(name)
        self.tick(name)

    def tick(self, name: str) -> None:
        self.clock += 1
        self._log.append(name)

    def bump(self, state: NodeState) -> None:
        """*state* changed: it starts with no answers of its own and its new state's."""
        if self._changed is not None:
            self._changed.add(state.name)
        self.tick(state.name)
        state.version = self.clock
        state.memo = {}
        state.state_key = None
        state.shared = self._shared_answers(state.state_id())

    def _shared_answers(self, state_id: int) -> dict[Any, Any]:
        """The answers every node in state *state_id* shares (``NodeState.shared``).

        State ids are never reused, so a dict stays right for its state; past the bound the
        table is emptied and nodes entering a state afterwards start a new dict for it.
        """
        found = self._shared.get(state_id)
        if found is None:
            if len(self._shared) >= MAX_SHARED_STATES:
                self._shared.clear()
            found = self._shared[state_id] = {}
        return found


__all__ = ["CHANGE_LOG", "MAX_SHARED_STATES", "NodeChanges"]

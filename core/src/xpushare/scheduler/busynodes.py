"""Binds in flight per node, and the /prioritize scores they lower.

Why: a node takes one pod's devices at a time. /bind hands each pod to the node's agent
through the node's handoff and waits until the agent has served the previous one (DESIGN.md
§6; HAMi's node lock has the same rule), because kubelet's Allocate does not say which pod
it is for. A packing policy (FGD, best-fit) ranks the same partly used node first for every
pod of a burst, so the burst queued behind that node's handoff: at 1,000 nodes through the
real kube-scheduler (benchmarks/bench_realcluster.py) 79 of 600 pods went to one node, binds
waited 0.8 s on average for the handoff, 58 of them timed out and were scheduled again, and
the extender phase bound 13 pods/s against 51 for kube-scheduler alone.

So a node with a bind in flight scores 0, as the worst node that fits: a burst goes to the
best node that is not busy (or, where none scores above 0, to any of the equals, which
kube-scheduler picks at random) and comes back to the best one once its handoff is free.
Dividing the score by the binds in flight was tried first and did not spread: a packing
policy scores an empty node 0, and a busy node's 10 halved still beat it. Only the order
between nodes moves, never whether a pod fits; with nothing in flight (every answer of the
benchmarks and the simulator, which bind nothing) the scores are unchanged.
"""

from __future__ import annotations


class BindsInFlight:
    """How many binds are between their reservation and their end, per node."""

    def __init__(self) -> None:
        self._nodes: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self._nodes)

    def started(self, node: str) -> None:
        self._nodes[node] = self._nodes.get(node, 0) + 1

    def finished(self, node: str) -> None:
        left = self._nodes.get(node, 0) - 1
        if left > 0:
            self._nodes[node] = left
        else:
            self._nodes.pop(node, None)

    def __contains__(self, node: object) -> bool:
        return node in self._nodes

    def count(self, node: str) -> int:
        return self._nodes.get(node, 0)

    def spread(self, names: list[str], scores: list[int]) -> list[int]:
        """*scores* (of *names*, in order) with each busy node's 0."""
        busy = self._nodes
        if not busy:
            return scores
        return [0 if n in busy else s for n, s in zip(names, scores, strict=True)]

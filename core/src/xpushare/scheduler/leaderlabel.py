"""The leader's pod carries a label, so a Service routes the extender's calls to it alone.

Why: a PodDisruptionBudget counts Ready pods. While only the leader was Ready (readiness
was the way the Service reached the leader alone), a budget either forbade evicting the
leader, blocking every drain of its node, or protected nothing. So every synced replica is
Ready (``/readyz/replica``, the chart's readiness probe), the budget keeps one of them up
through voluntary disruptions, and the Service selects the pod labelled
:data:`LEADER_LABEL` too, the way Patroni routes to a PostgreSQL primary.

A replica labels its own pod when it takes the Lease, and takes the label off the pods of
earlier leaders (a frozen one cannot do it itself) and off its own pod when it steps down.
The label only routes: fencing, not the label, is what keeps an old leader from binding
(docs/scheduler.md, "Why no interleaving can double-book"); a call the Service sends to an
old leader in the moment before its label goes is refused as from a follower.
"""

from __future__ import annotations

import asyncio
import logging

from xpushare.scheduler import objects as ob
from xpushare.scheduler.kube import Kube, KubeError, NotFound

log = logging.getLogger(__name__)

#: The label of the leader's pod (value "true"); the chart's Service selects it.
LEADER_LABEL = "xpushare.io/leader"
#: Tries of one change of the label: an API hiccup must not leave the Service without an
#: endpoint for long, and the next change of leadership tries again anyway.
ATTEMPTS = 5
#: Seconds between two tries (doubling).
RETRY_S = 0.5


class LeaderLabel:
    """Keeps :data:`LEADER_LABEL` on this replica's pod exactly while it leads."""

    def __init__(self, kube: Kube, *, namespace: str, pod: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.pod = pod
        self._task: asyncio.Task[None] | None = None

    def changed(self, leading: bool) -> None:
        """Leadership changed: apply it in the background (the newest change wins)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = asyncio.get_running_loop().create_task(
            self._apply(leading), name="leader-label"
        )

    async def finish(self, timeout_s: float) -> None:
        """Wait at most *timeout_s* for the last change (a replica stepping down at
        shutdown takes its label off), then give up on it."""
        task = self._task
        if task is None or task.done():
            return
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()

    async def _apply(self, leading: bool) -> None:
        delay = RETRY_S
        for attempt in range(ATTEMPTS):
            try:
                if leading:
                    await self._take()
                else:
                    await self._set(self.pod, None)
                return
            except KubeError as exc:
                log.warning(
                    "could not %s the leader label %s on pod %s/%s (try %d of %d): %s",
                    "set" if leading else "remove",
                    LEADER_LABEL,
                    self.namespace,
                    self.pod,
                    attempt + 1,
                    ATTEMPTS,
                    exc,
                )
                await asyncio.sleep(delay)
                delay *= 2

    async def _take(self) -> None:
        # Others first: for a moment the Service has no endpoint rather than two leaders'.
        for other in await self.kube.list_labelled_pods(self.namespace, f"{LEADER_LABEL}=true"):
            name = ob.name(other)
            if name and name != self.pod:
                await self._set(name, None)
        await self._set(self.pod, "true")

    async def _set(self, pod: str, value: str | None) -> None:
        try:
            await self.kube.patch_pod_labels(self.namespace, pod, {LEADER_LABEL: value})
        except NotFound:
            if value is not None:
                raise

"""List, then watch from the list's version: the scheduler's view of nodes and pods.

Why our own loop rather than the client's ``Watch``: ``kubernetes.aio.watch`` resumes a 410
Gone from the same too-old version once and then gives up, while a cache that feeds the usage
ledger must relist and reconcile (objects deleted while nobody watched are gone). This loop
resumes a closed stream from the last version it saw, relists on 410, backs off on errors,
and hands every event to :class:`~xpushare.scheduler.cluster.ClusterState` on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from xpushare.scheduler import objects as ob
from xpushare.scheduler.kube import Gone, Kube, KubeError, Resource

log = logging.getLogger(__name__)

#: Backoff after a failed list or watch: client-go's reflector starts near 1 s and caps at
#: 30 s; we start lower because a local API hiccup should not stall scheduling long.
BACKOFF_START_S = 0.2
BACKOFF_MAX_S = 30.0


@dataclass
class Handlers:
    """What an informer does with the objects it sees."""

    replace: Callable[[Iterable[ob.Object]], None]
    apply: Callable[[ob.Object], None]
    delete: Callable[[ob.Object], None]


class Informer:
    """One resource's list+watch loop; ``synced`` is set after the first complete list."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        handlers: Handlers,
        *,
        watch_timeout_s: int = 290,
        on_error: Callable[[str, Exception], None] | None = None,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.handlers = handlers
        self.watch_timeout_s = watch_timeout_s
        self.synced = asyncio.Event()
        self.version = ""
        self.relists = 0
        self._on_error = on_error or (lambda what, exc: None)

    async def run(self) -> None:
        backoff = BACKOFF_START_S
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    self.relists += 1
                    self.synced.set()
                    need_list = False
                async for event in self.kube.watch(
                    self.resource, self.version, self.watch_timeout_s
                ):
                    self._dispatch(event)
                    backoff = BACKOFF_START_S
                # The server ended the stream (its timeout): resume from the last version.
            except Gone:
                log.info(
                    "watch of %s expired at version %s: relisting", self.resource, self.version
                )
                need_list = True
            except asyncio.CancelledError:
                raise
            except (KubeError, ValueError) as exc:
                self._on_error(self.resource, exc)
                log.warning(
                    "%s of %s failed: %s; retrying in %.1f s",
                    "list" if need_list else "watch",
                    self.resource,
                    exc,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def _relist(self) -> None:
        # Its own frame, so the list dies when the handlers have read it: a local of run()
        # would keep every object of the last relist alive while the watch runs (67 MiB
        # at 5,000 nodes and 20,000 pods, bench_shapes --memory-sites).
        items, self.version = await self.kube.list(self.resource)
        self.handlers.replace(items)

    def _dispatch(self, event: ob.Object) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        version = ob.resource_version(obj)
        if version:
            self.version = version
        if kind == "BOOKMARK":
            return
        try:
            if kind in ("ADDED", "MODIFIED"):
                self.handlers.apply(obj)
            elif kind == "DELETED":
                self.handlers.delete(obj)
        except Exception as exc:
            # A bug handling one object must not stop the cache for every other object.
            self._on_error(self.resource, exc)
            log.exception("%s event for %s/%s failed", kind, self.resource, ob.name(obj))

"""List, then watch from the list's version: the scheduler's view of nodes and pods.

Why our own loop rather than the client's ``Watch``: ``kubernetes.aio.watch`` resumes a 410
Gone from the same too-old version once and then gives up, while a cache that feeds the usage
ledger must relist and reconcile (objects deleted while nobody watched are gone). This loop
resumes a closed stream from the last version it saw (a bookmark's too), relists on 410,
and hands every event to :class:`~xpushare.scheduler.cluster.ClusterState` on the event loop.

It is supervised the way client-go's reflector is: *any* failure of a list or a watch (an
error answer, a stream cut mid-event or closed without its last chunk, garbage on the wire,
a bug) is counted, logged and retried with backoff; nothing ends the loop but cancellation.
An informer that has been failing for longer than ``stale_after_s`` is not ``healthy``, and
the scheduler's readiness follows (a replica deciding on a view it cannot refresh must not
receive traffic).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from xpushare.scheduler import objects as ob
from xpushare.scheduler.kube import Gone, Kube, Resource
from xpushare.scheduler.versions import ListSnapshot, number

log = logging.getLogger(__name__)

#: Backoff after a failed list or watch: client-go's reflector starts near 1 s and caps at
#: 30 s; we start lower because a local API hiccup should not stall scheduling long.
BACKOFF_START_S = 0.2
BACKOFF_MAX_S = 30.0
#: How long an informer may go without a working list or watch before readiness turns
#: false: two of the longest backoffs, so one slow retry does not flap it, while a view a
#: minute old stops taking decisions (kube-scheduler's extender timeout then fails over).
STALE_AFTER_S = 60.0


@dataclass
class Handlers:
    """What an informer does with the objects it sees."""

    #: The whole list, and what it is as of (relists must not undo newer facts).
    replace: Callable[[Iterable[ob.Object], ListSnapshot], None]
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
        on_expired: Callable[[str], None] | None = None,
        stale_after_s: float = STALE_AFTER_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.handlers = handlers
        self.watch_timeout_s = watch_timeout_s
        self.stale_after_s = stale_after_s
        self.synced = asyncio.Event()
        self.version = ""
        self.relists = 0
        #: Watches started (the first one included): a restart after a cut counts here.
        self.watches = 0
        self._on_error = on_error or (lambda what, exc: None)
        self._on_expired = on_expired or (lambda what: None)
        self._monotonic = monotonic
        #: Since when lists and watches have failed without a success (None: working).
        self.failing_since: float | None = None

    def _opened(self) -> None:
        self.failing_since = None

    @property
    def healthy(self) -> bool:
        """False once the list or watch has failed for longer than ``stale_after_s``."""
        since = self.failing_since
        return since is None or self._monotonic() - since <= self.stale_after_s

    def _failed(self, exc: Exception, need_list: bool, backoff: float) -> None:
        if self.failing_since is None:
            self.failing_since = self._monotonic()
        self._on_error(self.resource, exc)
        log.warning(
            "%s of %s failed: %s: %s; retrying in %.1f s",
            "list" if need_list else "watch",
            self.resource,
            type(exc).__name__,
            exc,
            backoff,
        )

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
                    self.failing_since = None
                stream = self.kube.watch(
                    self.resource, self.version, self.watch_timeout_s, self._opened
                )
                self.watches += 1
                async for event in stream:
                    self.failing_since = None
                    self._dispatch(event)
                    backoff = BACKOFF_START_S
                # The server ended the stream (its timeout): resume from the last version.
                self.failing_since = None
            except Gone:
                log.info(
                    "watch of %s expired at version %s: relisting", self.resource, self.version
                )
                self._on_expired(self.resource)
                need_list = True
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Whatever broke (an error answer, a cut stream, a bug), the cache must not
                # stop following the cluster: count it and start again from what we hold.
                self._failed(exc, need_list, backoff)
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def _relist(self) -> None:
        # Its own frame, so the list dies when the handlers have read it: a local of run()
        # would keep every object of the last relist alive while the watch runs (67 MiB
        # at 5,000 nodes and 20,000 pods, bench_shapes --memory-sites).
        started = self._monotonic()
        items, self.version = await self.kube.list(self.resource)
        self.handlers.replace(items, ListSnapshot(number(self.version), started))

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

"""The web view's way to the scheduler's state: calls run on the scheduler's own loop.

Why: the web view serves its clients on a loop of its own in another thread
(``scheduler/loopthread.py``), but the ledger, the cluster state, the placer's memos and the
API client belong to the scheduler's loop, which changes them between two of its awaits
without locks. So every read is a call scheduled on that loop (``call_soon_threadsafe``):
it runs between two of the scheduler's callbacks, sees a consistent state, and hands back
plain values (dicts, lists, strings) that nothing changes afterwards; the web thread then
encodes and sends them. Each call's cost is bounded (one node, one page of names, the cached
fleet digests, or a what-if worked out in slices that give the loop back), so no web client
holds a decision up for longer than one of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


class SchedulerLoop:
    """Runs functions and coroutines on the scheduler's loop for the web view."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        #: ``None`` until the scheduler binds it (``app.py``): then calls run inline, on
        #: whatever loop the caller is (a web view built without a thread of its own).
        self.loop = loop

    def _here(self) -> bool:
        return self.loop is None or self.loop is asyncio.get_running_loop()

    async def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` run on the scheduler's loop (a function of bounded cost)."""
        if self._here():
            return fn(*args)
        assert self.loop is not None
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return  # the web client went away meanwhile
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to the caller, who answers 500
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return await asyncio.wrap_future(future)

    async def wait(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """*coro* run on the scheduler's loop (API calls, a what-if in slices)."""
        if self._here():
            return await coro
        assert self.loop is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

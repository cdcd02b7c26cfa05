"""An event loop of its own, in a thread of its own: where the web view runs.

Why: the web view (docs/web-view.md) parses pasted YAML, encodes megabytes of fleet JSON
and answers what-ifs for anyone who can reach its port; on the scheduler's loop two what-if
clients moved ``/filter`` from 1-3 ms to 0.25-1.2 s (issue 31, defect 6). On a loop of its
own its clients wait for each other only; what it reads of the scheduler's state it asks
the scheduler's loop for (``scheduler/web/bridge.py``), in calls of bounded cost.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


class LoopThread:
    """A daemon thread running an asyncio loop until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = False

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # Whatever is left (a handler cut short by the stop) is cancelled, then closed.
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    async def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run *coro* on this thread's loop and wait for its value from the caller's loop."""
        self.start()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    async def stop(self) -> None:
        """Stop the loop and wait, off the caller's loop, for the thread to end."""
        if not self._started or not self._thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self._thread.join)

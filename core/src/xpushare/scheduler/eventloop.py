"""Which event loop the scheduler runs on: uvloop where it is installed, else asyncio's own.

Why: the extender's CPU a pod is mostly the HTTP around its decisions (four requests served,
three API writes sent, their watch events read), and under asyncio's own loop a fifth of it
is the loop itself: its selector, transports and timers are Python. uvloop runs them in C
(libuv) with the same asyncio API; aiohttp, the kubernetes client and our connection guard
run on it unchanged (docs/benchmarks.md has the figures). ``server.event_loop`` picks:
``auto`` (uvloop if it imports), ``uvloop`` (required), ``asyncio``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from xpushare.errors import XpushareError

log = logging.getLogger(__name__)

T = TypeVar("T")
EventLoopChoice = Literal["auto", "uvloop", "asyncio"]


def loop_factory(choice: EventLoopChoice = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """The factory of the loop *choice* names; ``XpushareError`` if uvloop is required and
    cannot be imported."""
    if choice == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError as exc:
        if choice == "uvloop":
            raise XpushareError(
                f"server.event_loop is 'uvloop' but uvloop cannot be imported ({exc}); "
                "install it (pip install uvloop) or set server.event_loop to auto or asyncio"
            ) from None
        log.info("uvloop is not installed: running on asyncio's own event loop")
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], choice: EventLoopChoice = "auto") -> T:
    """``asyncio.run(main)`` on the loop *choice* names."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)

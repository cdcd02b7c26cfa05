"""Listeners that bound how long a client may take and how many connections it may hold.

Why: aiohttp's server closes a connection by itself only after its keep-alive timeout (an
hour under an ``AppRunner``), and never while a request's headers or body are still
arriving. A few hundred clients trickling a byte now and then would hold the extender's
sockets for ever, and past the process's file descriptors the listener stops accepting,
kube-scheduler's and the API server's calls included. So every connection here has one
deadline at a time:

- **headers**: the request's headers must be complete ``header_timeout_s`` after its first
  byte (on a new connection: after it was accepted, or its TLS handshake finished);
- **body**: the scheduler's own server gives a body ``body_timeout_s`` after its headers
  (``httpserver.py``); **request**: none, every handler's own work is bounded;
- **idle**: after an answer, a keep-alive connection may wait ``idle_timeout_s`` for its next
  request;
- **closing**: after an answer that closes the connection (the client was too slow), a
  short grace to flush it (the scheduler's own server, ``httpserver.py``).

A connection past its deadline is aborted. At most ``max_connections`` are open per
listener; one more is answered 503 and closed at once, so the clients already connected
keep being served and the other listener (probes, metrics) keeps its own budget.

The scheduler's own listeners (``httpserver.py``) keep these deadlines themselves and use
the guard for the count and the cap. For an aiohttp application (the web view) the guard
sits between asyncio's transport and aiohttp's protocol object as a transparent protocol: it
forwards every callback and only adds the timers; the request phases come from an aiohttp
middleware. Nothing of aiohttp's private state is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web

log = logging.getLogger(__name__)

#: How long an answer the server closes the connection after (a slow client's 408) may
#: take to flush: it is a few hundred bytes.
CLOSE_GRACE_S = 1.0

#: Descriptors the process needs besides the listeners' connections: the API client's
#: connections and watches, the TLS files, the plugins' libraries, logging.
FD_RESERVE = 256

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float
    idle_timeout_s: float
    max_connections: int


def _busy_answer(limit: int) -> bytes:
    text = (
        f"too many open connections to this listener (server.max_connections={limit}); "
        "retry shortly\n"
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(text)}\r\n"
        "Retry-After: 1\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    return head + text


#: Why a connection was cut, by the phase its deadline passed in.
CLOSE_REASONS = {"headers": "header-timeout", "idle": "idle-timeout", "closing": "close-timeout"}


class Deadline:
    """A connection's one deadline at a time: armed anew for each phase, paused while a
    request is being answered (its handler bounds its own work).

    Lazy: arming for a time no earlier than the timer already set only moves the due time;
    the timer, when it fires before the due time, sets itself again for what is left. So a
    kept-alive connection's requests (headers, body, idle: three arms each) cost a float
    each, not a timer made and cancelled: that was ~2 % of a filter worker's CPU a pod in
    bench_throughput (2026-12-03). :meth:`stop` drops the timer for good (connection lost).
    """

    __slots__ = ("_due", "_expired", "_timer", "_when")

    def __init__(self, expired: Callable[[], None]) -> None:
        self._expired = expired
        self._timer: asyncio.TimerHandle | None = None
        #: When the connection's time is up (the loop's clock); None: no deadline now.
        self._due: float | None = None
        #: What the timer was set for.
        self._when = 0.0

    def cancel(self) -> None:
        """No deadline until the next :meth:`arm` (the timer, if set, will find none)."""
        self._due = None

    def stop(self) -> None:
        """No deadline, and no timer left behind."""
        self._due = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def arm(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        due = self._due = loop.time() + seconds
        if self._timer is not None:
            if self._when <= due:
                return  # it fires first and sets itself again for the rest
            self._timer.cancel()
        self._when = due
        self._timer = loop.call_at(due, self._fire)

    def _fire(self) -> None:
        self._timer = None
        due = self._due
        if due is None:
            return
        if due > self._when:  # moved later since the timer was set
            self._when = due
            self._timer = asyncio.get_running_loop().call_at(due, self._fire)
            return
        self._due = None
        self._expired()


class _Connection(asyncio.Protocol):
    """One connection: forwards to aiohttp's protocol and keeps the connection's deadline."""

    def __init__(self, guard: ConnectionGuard, make_inner: Callable[[], asyncio.Protocol]) -> None:
        self._guard = guard
        self._make_inner = make_inner
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._deadline = Deadline(self._expired)
        self.phase = "headers"

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: asyncio's own, or uvloop's, which has the same methods but
        # is not a subclass (so no isinstance check here).
        self._transport = cast("asyncio.Transport", transport)
        guard = self._guard
        if not guard.admit(transport, self):
            return  # refused before aiohttp sees it: no handler, no parser, no buffers
        self._deadline.arm(guard.limits.header_timeout_s)
        self._inner = self._make_inner()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self.phase == "idle" and data:
            # The first byte of the next request on a kept-alive connection.
            self.phase = "headers"
            self._deadline.arm(self._guard.limits.header_timeout_s)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline.stop()
        if self._inner is None:
            return
        self._guard.released(self._transport)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    # -- phases, from the middleware ---------------------------------------------------------

    def request_started(self) -> None:
        self.phase = "request"
        self._deadline.cancel()

    def request_finished(self) -> None:
        self.phase = "idle"
        self._deadline.arm(self._guard.limits.idle_timeout_s)

    # -- the deadline ------------------------------------------------------------------------

    def _expired(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._guard.cut(transport, self.phase)


class ConnectionGuard:
    """The connections of one listener: their count, their deadlines, their middleware."""

    def __init__(
        self,
        name: str,
        limits: ConnectionLimits,
        *,
        on_active: Callable[[int], None] | None = None,
        on_closed: Callable[[str], None] | None = None,
    ) -> None:
        self.name = name
        self.limits = limits
        self.active = 0
        self.busy_answer = _busy_answer(limits.max_connections)
        #: Each open connection's protocol (``_Connection`` here, or ``HttpConnection`` of
        #: httpserver.py).
        self._connections: dict[asyncio.BaseTransport, Any] = {}
        self._on_active = on_active or (lambda n: None)
        self._on_closed = on_closed or (lambda reason: None)

    def protocol_factory(self, server: web.Server) -> Callable[[], asyncio.Protocol]:
        def make() -> asyncio.Protocol:
            # aiohttp's own protocol object is made only once the connection is admitted.
            return _Connection(self, server)

        return make

    def admit(self, transport: asyncio.BaseTransport, connection: Any) -> bool:
        """Count a new connection; when the listener is full, answer 503 and close it."""
        if self.active >= self.limits.max_connections:
            self.closed("over-capacity")
            stream = cast("asyncio.Transport", transport)
            stream.write(self.busy_answer)
            stream.close()
            return False
        self.opened(transport, connection)
        return True

    def opened(self, transport: asyncio.BaseTransport, connection: Any) -> None:
        self._connections[transport] = connection
        self.active += 1
        self._on_active(self.active)

    def released(self, transport: asyncio.BaseTransport | None) -> None:
        if transport is not None and self._connections.pop(transport, None) is not None:
            self.active -= 1
            self._on_active(self.active)

    def cut(self, transport: asyncio.BaseTransport, phase: str) -> None:
        """Abort a connection whose deadline passed in *phase*, counted by its reason."""
        self.closed(CLOSE_REASONS.get(phase, phase))
        # abort, not close: close() waits for the write buffer to drain, and a client that
        # stopped reading would keep it full.
        cast("asyncio.Transport", transport).abort()

    def closed(self, reason: str) -> None:
        log.debug("%s listener: closed a connection (%s)", self.name, reason)
        self._on_closed(reason)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        connection = self._connections.get(transport) if transport is not None else None
        if connection is None:
            return await handler(request)
        connection.request_started()
        try:
            return await handler(request)
        finally:
            # The answer is written after this returns; a client that does not read it is
            # cut off by the idle deadline like an idle one.
            connection.request_finished()


class GuardedSite(web.BaseSite):
    """A TCP listener whose connections go through a :class:`ConnectionGuard`."""

    __slots__ = ("_guard", "_host", "_port")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._guard = guard

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (the configured one until started; useful with port 0)."""
        sockets = getattr(self._server, "sockets", None) or []
        return int(sockets[0].getsockname()[1]) if sockets else self._port

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {}
        if self._ssl_context is not None:
            # A client that stalls its handshake is as slow as one that stalls its headers.
            extra["ssl_handshake_timeout"] = self._guard.limits.header_timeout_s
        self._server = await loop.create_server(
            self._guard.protocol_factory(server),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            **extra,
        )


def ensure_descriptors(needed: int) -> int:
    """Raise the soft limit of open files towards *needed* (up to the hard limit).

    Container runtimes often start processes with a soft limit of 1,024 (containerd 2), below
    what ``max_connections`` allows; past it ``accept`` fails and asyncio stops accepting for
    a second on every listener, the probes' too. Go programs raise it the same way at start.
    Returns the soft limit in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < needed:
        log.warning(
            "open-file limit %d is below the %d the connection caps need "
            "(server.max_connections per listener); lower the cap or raise the limit",
            soft,
            needed,
        )
    return soft

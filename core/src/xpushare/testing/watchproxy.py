"""A TCP proxy between a client and an API server that does to watch streams what networks,
load balancers and crashing API servers do: hold them back, drip them, cut them mid-event,
and close them after an event without the last chunk.

Why a proxy and not a mode of the fake API server: the faults live on the wire, below HTTP,
so the client's real stream reader (aiohttp's chunked decoder, our line splitter) must meet
them; and the same proxy stands in front of a real kube-apiserver.

It understands just enough HTTP/1.1 to know which connection carries a watch of which
resource (the request line of each request a client sends) and where an answer's chunks
begin and end (``Transfer-Encoding: chunked``, which both the fake and the real server use
for watches). Everything else is forwarded byte for byte. Use it as::

    async with WatchProxy("127.0.0.1", api.port) as proxy:
        ...  # point the client at proxy.url
        proxy.hold("pods")            # pod watch events stop reaching the client
        proxy.release("pods")         # and now arrive, in order
        proxy.cut("pods", mid_event=True)  # the next pod event is cut in half, then EOF

Nothing here retries or reorders: what the client sees is a prefix of what the server sent,
delayed, then maybe cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

#: A request line of a watch: ``GET /api/v1/pods?...watch=true...`` (or a namespaced path).
_REQUEST = re.compile(rb"^(?P<method>[A-Z]+) (?P<path>\S+) HTTP/1\.[01]\r$", re.MULTILINE)
_PLURAL = re.compile(r"/(?P<plural>[a-z]+)(?:\?|$)")
#: How long the first half of a cut event is left for the client to read before the reset.
CUT_READ_S = 0.05
#: The end of a watch event's line and of the chunk that carries it.
_EVENT_END = b"\n\r\n"


@dataclass
class _Rule:
    held: bool = False
    #: Seconds between two bytes forwarded (0: at once).
    drip_s: float = 0.0
    #: "mid" or "after": cut the next event this way, then close.
    cut: str = ""
    released: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(eq=False)
class _Link:
    """One client connection and what it carries now."""

    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    resource: str = ""
    watching: bool = False


class WatchProxy:
    """A local TCP proxy with faults for watch streams (see the module docstring)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._rules: dict[str, _Rule] = {}
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        #: Watch requests seen per resource (a restarted watch counts again).
        self.watches: dict[str, int] = {}
        #: Watch streams cut by this proxy, per resource.
        self.cuts: dict[str, int] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> WatchProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for rule in self._rules.values():
            rule.released.set()
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            for writer in (link.client, link.server):
                writer.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    # -- faults ----------------------------------------------------------------------------

    def _rule(self, resource: str) -> _Rule:
        rule = self._rules.get(resource)
        if rule is None:
            rule = self._rules[resource] = _Rule()
            rule.released.set()
        return rule

    def hold(self, resource: str) -> None:
        """Stop forwarding the watch streams of *resource* (bytes wait here, in order)."""
        rule = self._rule(resource)
        rule.held = True
        rule.released.clear()

    def release(self, resource: str) -> None:
        """Forward what was held, and everything after it."""
        rule = self._rule(resource)
        rule.held = False
        rule.released.set()

    def drip(self, resource: str, seconds_per_byte: float) -> None:
        """Forward the watch streams of *resource* one byte every *seconds_per_byte*."""
        self._rule(resource).drip_s = seconds_per_byte

    def cut(self, resource: str, *, mid_event: bool) -> None:
        """Cut the next event of a watch of *resource*: halfway through it (*mid_event*),
        or right after it without the stream's last chunk; then close the connection."""
        self._rule(resource).cut = "mid" if mid_event else "after"

    def cut_now(self, resource: str) -> int:
        """Close every open watch of *resource* at once (a reset); how many."""
        cut = 0
        for link in list(self._links):
            if link.watching and link.resource == resource:
                link.client.close()
                link.server.close()
                cut += 1
        self.cuts[resource] = self.cuts.get(resource, 0) + cut
        return cut

    # -- plumbing ----------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        self._spawn(self._upstream(link, reader))
        try:
            await self._downstream(link, up_reader)
        finally:
            self._links.discard(link)
            for w in (writer, up_writer):
                w.close()

    async def _upstream(self, link: _Link, reader: asyncio.StreamReader) -> None:
        """Client to server: byte for byte, noting each request's line."""
        with contextlib.suppress(Exception):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                for match in _REQUEST.finditer(data):
                    path = match.group("path").decode("latin-1")
                    found = _PLURAL.search(path.split("?", 1)[0] + "?")
                    link.resource = found.group("plural") if found else ""
                    link.watching = "watch=true" in path or "watch=1" in path
                    if link.watching:
                        self.watches[link.resource] = self.watches.get(link.resource, 0) + 1
                link.server.write(data)
                await link.server.drain()
        with contextlib.suppress(Exception):
            link.server.close()

    async def _downstream(self, link: _Link, reader: asyncio.StreamReader) -> None:
        """Server to client: through the rules of the watched resource."""
        while True:
            try:
                data = await reader.read(65536)
            except (ConnectionError, OSError):
                return
            if not data:
                return
            if not link.watching:
                link.client.write(data)
                with contextlib.suppress(ConnectionError):
                    await link.client.drain()
                continue
            rule = self._rule(link.resource)
            await rule.released.wait()
            if rule.cut and _EVENT_END in data:
                await self._cut(link, rule, data)
                return
            if rule.drip_s > 0:
                for i in range(len(data)):
                    link.client.write(data[i : i + 1])
                    await link.client.drain()
                    await asyncio.sleep(rule.drip_s)
                continue
            link.client.write(data)
            try:
                await link.client.drain()
            except ConnectionError:
                return

    async def _cut(self, link: _Link, rule: _Rule, data: bytes) -> None:
        """Forward part of *data* (which holds the end of an event's chunk) and close."""
        mode, rule.cut = rule.cut, ""
        # An event is one JSON line in one chunk: "<size>\r\n{...}\n\r\n" (JSON escapes
        # its own line breaks, so the last CRLF before the line's end closes the size).
        end = data.index(_EVENT_END)
        start = data.rfind(b"\r\n", 0, end)
        start = start + 2 if start >= 0 else 0
        if mode == "mid":
            # Half of the event's bytes: the client holds a line with no end.
            keep = data[: start + max(1, (end - start) // 2)]
        else:
            # The whole event and its chunk's end, but never the stream's last chunk.
            keep = data[: end + len(_EVENT_END)]
        self.cuts[link.resource] = self.cuts.get(link.resource, 0) + 1
        link.client.write(keep)
        with contextlib.suppress(ConnectionError):
            await link.client.drain()
        if mode == "mid":
            # A reset rather than a polite close: what a crash or a load balancer leaves.
            # Only once the half event has been read: Linux drops unread data on a reset,
            # and a stream reset at a chunk's boundary reads as a clean end.
            await asyncio.sleep(CUT_READ_S)
            sock = link.client.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            link.client.transport.abort()
        else:
            link.client.close()
        link.server.close()

"""``/metrics``, ``/healthz`` and ``/readyz`` of the node agent, on its own event loop.

Why a small HTTP/1.1 server on asyncio's streams rather than aiohttp or prometheus_client's
threaded server: the probes read the agent's live state (task group, registrations) without
locks, one server answers all three paths, and aiohttp's import alone costs about 9 MiB of
the agent's 64 MiB budget (DESIGN.md §9) for three GET routes. ``/metrics`` only renders
in-memory state (see :mod:`xpushare.node.metrics`), so it never waits on a vendor library.

* ``/healthz``: 200 while every part of the agent runs; 503 once one failed (the process is
  about to exit) or it is stopping. A liveness probe.
* ``/readyz``: 200 once the inventory is published and every active vendor's device plugin
  is registered with kubelet; 503 with the reasons otherwise (e.g. during kubelet restarts).

Hostile or broken clients are bounded: a request head of at most :data:`MAX_HEAD` bytes read
within :data:`READ_TIMEOUT_S`, no request bodies, at most :data:`MAX_CONNECTIONS` open
connections (more are closed at once), GET and HEAD only.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from xpushare.node.config import NodeConfig
    from xpushare.node.metrics import AgentMetrics
    from xpushare.node.tasks import TaskGroup

_TEXT = "text/plain; charset=utf-8"

#: Largest request head (request line and headers): probes and Prometheus send a few hundred
#: bytes; 16 KiB is what common servers allow for all headers together.
MAX_HEAD = 16 << 10

#: A client must send its request head within this: a scrape sends it at once, and a
#: connection kept alive between scrapes (Prometheus scrapes every 15-60 s) is closed when
#: idle longer, so a slow client cannot hold one open forever.
READ_TIMEOUT_S = 75.0

#: Open connections at once: the kubelet's two probes and a few scrapers need a handful;
#: beyond 64 a connection is closed at once, so a flood costs no memory.
MAX_CONNECTIONS = 64

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS |= {413: "Payload Too Large", 503: "Service Unavailable"}


class NodeAgent(Protocol):
    """What the server reads of the node agent (``xpushare.node.agent.NodeAgent``), which
    starts it: a protocol, so the two modules do not import each other."""

    @property
    def config(self) -> NodeConfig: ...

    @property
    def metrics(self) -> AgentMetrics: ...

    @property
    def group(self) -> TaskGroup: ...

    #: The port bound, once serving (the configured one may be 0: any free port).
    http_port: int | None

    def readiness(self) -> list[str]: ...


def route(agent: NodeAgent, method: str, path: str) -> tuple[int, str, bytes]:
    """(status, content type, body) of one request."""
    if method not in ("GET", "HEAD"):
        return 405, _TEXT, b"only GET and HEAD\n"
    if path == "/metrics":
        return 200, CONTENT_TYPE_LATEST, generate_latest(agent.metrics.registry)
    if path == "/healthz":
        if agent.group.stopped:
            failed = "; ".join(f"{f.name}: {f.error}" for f in agent.group.failures)
            return 503, _TEXT, f"stopping{': ' + failed if failed else ''}\n".encode()
        return 200, _TEXT, b"ok\n"
    if path == "/readyz":
        reasons = agent.readiness()
        if reasons:
            return 503, _TEXT, ("\n".join(reasons) + "\n").encode()
        return 200, _TEXT, b"ok\n"
    return 404, _TEXT, b"not found: the agent serves /metrics, /healthz and /readyz\n"


class _Server:
    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent
        self.open = 0
        self.writers: set[asyncio.StreamWriter] = set()

    def close_all(self) -> None:
        """End every open connection (kept-alive ones would otherwise wait out their timeout)."""
        for writer in list(self.writers):
            writer.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.writers.add(writer)
        try:
            if self.open <= MAX_CONNECTIONS:
                await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except TimeoutError:
            pass
        finally:
            self.open -= 1
            self.writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            async with asyncio.timeout(READ_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                await self._send(writer, 400, _TEXT, b"malformed request line\n", "GET", False)
                return
            method, target, version = parts
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            if headers.get("content-length", "0") not in ("", "0") or (
                "transfer-encoding" in headers
            ):
                await self._send(writer, 413, _TEXT, b"requests carry no body\n", method, False)
                return
            keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
            status, content_type, body = route(self.agent, method, target.split("?", 1)[0])
            await self._send(writer, status, content_type, body, method, keep)
            if not keep:
                return

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        content_type: str,
        body: bytes,
        method: str,
        keep: bool,
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
        await writer.drain()


async def serve_http(agent: NodeAgent) -> None:
    """Serve until cancelled; the bound port is left in ``agent.http_port``."""
    state = _Server(agent)
    server = await asyncio.start_server(
        state.handle, agent.config.metrics_host, agent.config.metrics_port, limit=MAX_HEAD
    )
    try:
        sockets = server.sockets
        agent.http_port = int(sockets[0].getsockname()[1]) if sockets else agent.config.metrics_port
        await asyncio.Event().wait()
    finally:
        server.close()
        state.close_all()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await server.wait_closed()

"""The object calls of a bind over plain HTTP/1.1 keep-alive connections of our own.

Why: a bind writes three objects (the node's handoff, the Binding, the event), and through
the official client each call cost about 310 us of the scheduler's CPU against 40 us for
the same bytes on a connection of our own (aiohttp's client request and response machinery,
not the network; measured in one process, both sides). That was a sixth of the leader's CPU
a pod (docs/benchmarks.md). Everything that decides what is sent stays the official
client's: the URL, the headers and the token (with its refresh) come from its
``ApiClient.param_serialize``; the TLS settings from its ``Configuration``. Only the bytes on
the wire are ours, so there is little to get wrong: a request line, headers, a body with
its length; an answer's status, headers and a body by ``Content-Length`` or chunks.

Limits, because an answer is input too: headers at most 64 KiB, a body at most 32 MiB (the
API server's objects are at most 1.5 MiB, its own request cap is 3 MiB), a whole exchange
within the request timeout; anything else closes the connection. A connection that sat idle
in the pool may have been closed by the server meanwhile: a request that fails on a reused
connection before any byte of an answer arrives is sent once more on a new one (each write
here is safe to repeat: the handoff and the Binding carry resourceVersion preconditions, so
a repeat is refused with 409, which the callers already handle; an event repeated is an
event twice). Where a proxy or a netrc file could matter (kube.py), or a client certificate
from an exec plugin, the official client's own transport is used instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024
#: Idle connections kept per API server: binds in flight each hold one while they write.
POOL_SIZE = 16
#: An idle connection older than this is closed rather than reused: below the idle timeouts
#: of the API server and of load balancers in front of it (Go's net/http: 90 s).
IDLE_S = 30.0


class WireError(Exception):
    """The exchange failed (connection, timeout, a malformed or oversized answer)."""


class _Stale(WireError):
    """A reused connection closed before any byte of an answer: safe to send again."""


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def close(self) -> None:
        self.writer.close()


def ssl_context(configuration: Any) -> ssl.SSLContext:
    """The TLS context the official client would use for *configuration*."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class ApiWriter:
    """Requests to one API server over a small pool of keep-alive connections."""

    def __init__(
        self,
        base_url: str,
        *,
        context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.netloc = parts.netloc
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = f"{parts.scheme}://{parts.netloc}"
        self.context = context if parts.scheme == "https" else None
        if parts.scheme == "https" and self.context is None:
            self.context = ssl.create_default_context()
        self.server_hostname = server_hostname or (self.host if self.context else None)
        self.timeout_s = timeout_s
        self._idle: list[_Connection] = []
        self.opened = 0

    def serves(self, url: str) -> bool:
        """Whether *url* is on this writer's server (param_serialize's URLs always are)."""
        return url.startswith(self.prefix) and url[len(self.prefix) : len(self.prefix) + 1] in (
            "/",
            "",
        )

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[int, bytes]:
        """Send one request; its status and body. ``WireError`` when there is no answer."""
        target = url[len(self.prefix) :] or "/"
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.netloc}"]
        for name, value in headers.items():
            if "\r" in name or "\n" in name or "\r" in str(value) or "\n" in str(value):
                raise WireError(f"header {name!r} holds a line break")
            if name.lower() not in ("host", "content-length", "connection"):
                lines.append(f"{name}: {value}")
        payload = body or b""
        lines.append(f"Content-Length: {len(payload)}")
        message = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload
        try:
            async with asyncio.timeout(self.timeout_s):
                connection, reused = await self._take()
                try:
                    return await self._exchange(connection, message, reused)
                except _Stale:
                    connection, _ = await self._open()
                    return await self._exchange(connection, message, False)
        except TimeoutError:
            raise WireError(f"no answer within {self.timeout_s} s") from None
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            raise WireError(f"{type(exc).__name__}: {exc}") from exc

    async def _take(self) -> tuple[_Connection, bool]:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < IDLE_S and not connection.writer.is_closing():
                return connection, True
            connection.close()
        return await self._open()

    async def _open(self) -> tuple[_Connection, bool]:
        reader, writer = await asyncio.open_connection(
            self.host,
            self.port,
            ssl=self.context,
            server_hostname=self.server_hostname,
            limit=MAX_HEADER_BYTES,
        )
        self.opened += 1
        return _Connection(reader, writer), False

    async def _exchange(
        self, connection: _Connection, message: bytes, reused: bool
    ) -> tuple[int, bytes]:
        reader, writer = connection.reader, connection.writer
        keep = False
        try:
            try:
                writer.write(message)
                await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                partial = getattr(exc, "partial", b"")
                if reused and not partial:
                    raise _Stale(str(exc)) from exc
                raise
            except asyncio.LimitOverrunError:
                raise WireError(f"answer headers longer than {MAX_HEADER_BYTES} bytes") from None
            status, fields = _head(head)
            body = await _body(reader, fields)
            keep = fields.get("connection", "").lower() != "close"
            return status, body
        finally:
            if keep and len(self._idle) < POOL_SIZE:
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            else:
                connection.close()


def _head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
        raise WireError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    try:
        status = int(status_line[1])
    except ValueError:
        raise WireError(f"bad status line: {lines[0][:80]!r}") from None
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise WireError(f"bad header line: {line[:80]!r}")
        fields[name.strip().lower()] = value.strip()
    return status, fields


async def _body(reader: asyncio.StreamReader, fields: Mapping[str, str]) -> bytes:
    if "chunked" in fields.get("transfer-encoding", "").lower():
        chunks: list[bytes] = []
        size = 0
        while True:
            line = await reader.readuntil(b"\r\n")
            try:
                length = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise WireError(f"bad chunk size line: {line[:40]!r}") from None
            size += length
            if size > MAX_BODY_BYTES:
                raise WireError(f"answer body larger than {MAX_BODY_BYTES} bytes")
            if length == 0:
                # Trailers, then the blank line that ends them.
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                return b"".join(chunks)
            chunks.append(await reader.readexactly(length))
            await reader.readexactly(2)
    text = fields.get("content-length")
    if text is None:
        raise WireError("answer with neither Content-Length nor chunked encoding")
    try:
        length = int(text)
    except ValueError:
        raise WireError(f"bad Content-Length {text[:20]!r}") from None
    if not 0 <= length <= MAX_BODY_BYTES:
        raise WireError(f"answer body of {length} bytes (at most {MAX_BODY_BYTES})")
    return await reader.readexactly(length) if length else b""


def writer_for(configuration: Any, timeout_s: float) -> ApiWriter | None:
    """A writer for the client's *configuration*, or ``None`` where the official transport
    must stay (a proxy set in the configuration)."""
    if getattr(configuration, "proxy", None):
        return None
    host = str(configuration.host)
    context = None
    if host.startswith("https"):
        context = ssl_context(configuration)
    with contextlib.suppress(ValueError):
        return ApiWriter(
            host,
            context=context,
            server_hostname=getattr(configuration, "tls_server_name", None),
            timeout_s=timeout_s,
        )
    return None

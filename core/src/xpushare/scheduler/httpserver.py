"""The scheduler's own HTTP/1.1 server: JSON verbs, probes and metrics, everything bounded.

Why not aiohttp on these listeners: each pod costs the extender four requests (the webhook,
/filter, /prioritize, /bind), and aiohttp's request and response objects, middleware chain
and writer cost 220-270 us of CPU a request where a bare protocol costs 80-100 us
(docs/benchmarks.md, session 8): a tenth of a pod's whole budget at 300 pods/s on 2 cores.
What the extender's listeners need is small: POST with a JSON body, GET for the probes and
metrics, keep-alive, TLS. This module parses request heads itself (bounded: at most
:data:`MAX_HEAD_BYTES` and :data:`MAX_HEADERS`), reads bodies framed by Content-Length or
chunked (bounded by ``server.max_body_bytes``), answers each request with one write, and
calls a synchronous handler inline, so /filter and /prioritize cost no task and no
coroutine. The web view keeps aiohttp (docs/web-view.md): it is not on a pod's path.

Every connection has one deadline at a time, as in ``connections.py``, whose
:class:`~xpushare.scheduler.connections.ConnectionGuard` counts them and caps them:

- **headers**: complete ``header_timeout_s`` after the request's first byte (a new
  connection: after it was accepted, or its TLS handshake finished);
- **body**: complete ``body_timeout_s`` after the headers (408, then the connection closes);
- **request**: none here; a handler's own work is bounded by the handler;
- **idle**: after an answer, ``idle_timeout_s`` for the next request's first byte;
- **closing**: after an answer that closes the connection, a short grace to flush it.

What is refused, and how (each a 4xx, so a fuzzer's "2xx or 4xx" holds): a head past the
bound 431; a malformed request line, header, length or chunk 400; a version other than
HTTP/1.0 or 1.1 400; Content-Length and Transfer-Encoding together 400 (the framing a
smuggler plays on); a transfer coding other than chunked 400; ``Expect`` other than
``100-continue`` 417; a body past the cap 413; an unknown path 404; a known path with another
method 405. After any of these but 404 and 405 the connection is closed: what follows in the
stream cannot be trusted to start a request.

A client that disconnects does not cancel its handler (a /bind in flight finishes; its
answer is dropped), as aiohttp does by default. A client that sends requests without reading
the answers is paused once the answers it left unread pass the transport's high-water mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, cast

from xpushare.scheduler.connections import CLOSE_GRACE_S, ConnectionGuard, Deadline

log = logging.getLogger(__name__)

#: A request's line and headers together: kube-scheduler's and the API server's are a few
#: hundred bytes; aiohttp's default limit is 8,190 bytes a line, 32 KiB is far past any
#: real client and small enough that 10,000 connections cannot hold much.
MAX_HEAD_BYTES = 32 * 1024
#: Header lines a request may carry (aiohttp: 32,768 fields; Go's server: by size only).
MAX_HEADERS = 128
#: A chunk-size line ("1a2b;ext=...\r\n"): far past any real extension.
MAX_CHUNK_LINE = 1024
#: Digits of a Content-Length or a chunk size: 2**63 has 19 decimal, 16 hex digits.
MAX_LENGTH_DIGITS = 19

_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_HEX = frozenset("0123456789abcdefABCDEF")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Request:
    """One request as a handler sees it: method, path, query, headers, body."""

    __slots__ = ("body", "connection", "headers", "method", "path", "query")

    def __init__(
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        body: bytes,
        connection: HttpConnection,
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        #: Header names in lower case; repeated headers joined with ", ".
        self.headers = headers
        self.body = body
        self.connection = connection


class Reply:
    """What a handler answers: status, body, content type, extra headers, whether to close."""

    __slots__ = ("body", "close", "content_type", "headers", "status")

    def __init__(
        self,
        status: int = 200,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: tuple[tuple[str, str], ...] = (),
        *,
        close: bool = False,
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers
        self.close = close


Handler = Callable[[Request], "Reply | Awaitable[Reply]"]
#: Answers the server's own refusals for a path: (path, status, reason, message) -> Reply.
#: The scheduler words them as the verb's answers are worded and counts them.
ErrorHook = Callable[[str, int, str, str], Reply]


class Limits:
    """The bounds of one listener (``server.*`` in the configuration)."""

    __slots__ = ("body_timeout_s", "header_timeout_s", "idle_timeout_s", "max_body_bytes")

    def __init__(
        self,
        *,
        header_timeout_s: float,
        body_timeout_s: float,
        idle_timeout_s: float,
        max_body_bytes: int,
    ) -> None:
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_body_bytes = max_body_bytes


def plain_error(path: str, status: int, reason: str, message: str) -> Reply:
    """The default :data:`ErrorHook`: the message as text."""
    return Reply(status, (message + "\n").encode(), "text/plain; charset=utf-8")


class _Refuse(Exception):
    """A request the server itself refuses: the status, a reason label and a message."""

    def __init__(self, status: int, reason: str, message: str, *, close: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.close = close


_REASONS = {s.value: s.phrase for s in HTTPStatus}
_date_second = -1
_date_text = ""


def _date() -> str:
    """The Date header's value, formatted at most once a second."""
    global _date_second, _date_text
    now = int(time.time())
    if now != _date_second:
        _date_second = now
        _date_text = formatdate(now, usegmt=True)
    return _date_text


def encode_reply(reply: Reply, *, close: bool, head_only: bool = False) -> bytes:
    """The bytes of *reply* on the wire (one write)."""
    body = reply.body
    parts = [
        f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Unknown')}\r\n"
        f"Content-Type: {reply.content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Date: {_date()}\r\n"
    ]
    for name, value in reply.headers:
        parts.append(f"{name}: {value}\r\n")
    if close:
        parts.append("Connection: close\r\n")
    parts.append("\r\n")
    head = "".join(parts).encode("latin-1")
    return head if head_only else head + body


def _length(value: str) -> int:
    """A Content-Length value (repeats of one number allowed, as RFC 9110 permits)."""
    values = {v.strip() for v in value.split(",")}
    if len(values) != 1:
        raise _Refuse(400, "bad-length", f"conflicting Content-Length values: {value[:64]!r}")
    (text,) = values
    if not text or len(text) > MAX_LENGTH_DIGITS or not text.isascii() or not text.isdigit():
        raise _Refuse(400, "bad-length", f"Content-Length is not a length: {text[:64]!r}")
    return int(text)


def parse_head(head: bytes) -> tuple[str, str, str, str, dict[str, str]]:
    """(method, path, query, version, headers) of a request head without its blank line."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes every byte; kept for clarity
        raise _Refuse(400, "bad-head", "request head is not text") from None
    lines = text.split("\r\n")
    if len(lines) - 1 > MAX_HEADERS:
        raise _Refuse(431, "head-too-large", f"more than {MAX_HEADERS} header lines")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise _Refuse(400, "bad-head", f"malformed request line {lines[0][:80]!r}")
    method, target, version = parts
    if not method or not _TOKEN.issuperset(method):
        raise _Refuse(400, "bad-head", f"malformed method {method[:40]!r}")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _Refuse(400, "bad-head", f"unsupported HTTP version {version[:40]!r}")
    if not target.startswith("/") or any(c <= " " or c == "\x7f" for c in target):
        raise _Refuse(400, "bad-head", f"malformed request target {target[:80]!r}")
    path, _, query = target.partition("?")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or not _TOKEN.issuperset(name):
            # Also a folded line (obsolete, RFC 9112 §5.2) or a space before the colon.
            raise _Refuse(400, "bad-head", f"malformed header line {line[:80]!r}")
        name = name.lower()
        value = value.strip(" \t")
        if any((c < " " and c != "\t") or c == "\x7f" for c in value):
            raise _Refuse(400, "bad-head", f"control character in header {name!r}")
        found = headers.get(name)
        headers[name] = value if found is None else f"{found}, {value}"
    return method, path, query, version, headers


class _Body:
    """How the body of the request being read is framed, and what has come of it."""

    __slots__ = ("chunk_left", "chunks", "length", "size", "state", "trailer_bytes")

    def __init__(self, length: int | None) -> None:
        #: Content-Length; ``None``: chunked.
        self.length = length
        self.chunks: list[bytes] = []
        self.size = 0
        self.state = "size"  # chunked: size, data, data-end, trailers
        self.chunk_left = 0
        self.trailer_bytes = 0


class HttpConnection(asyncio.Protocol):
    """One client connection: parse, bound, dispatch, answer, in order."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._guard = server.guard
        self._limits = server.limits
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._deadline = Deadline(self._expired)
        self.phase = "headers"
        #: The request whose body is being read: (method, path, query, headers, close, head).
        self._pending: tuple[str, str, str, dict[str, str], bool, bool] | None = None
        self._body: _Body | None = None
        self._busy = False  # a handler's answer is awaited
        self._read_paused = False
        self._write_paused = False
        self._closing = False
        self._eof = False

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast("asyncio.Transport", transport)
        if not self._guard.admit(transport, self):
            self._closing = True
            return
        self._server.connections.add(self)
        self._deadline.arm(self._limits.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._buffer += data
        if self._busy or self._write_paused:
            if len(self._buffer) > MAX_HEAD_BYTES + self._limits.max_body_bytes:
                self._pause_reading()
            return
        self._process()

    def eof_received(self) -> bool | None:
        # The client is done sending. An answer being worked out is still written (a
        # client may half-close after its request), then the connection closes; otherwise
        # it closes now (a request cut short can never complete).
        self._eof = True
        return True if self._busy else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline.stop()
        self._closing = True
        if self._transport is not None:
            self._guard.released(self._transport)
        self._server.connections.discard(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self._busy:
            self._resume_reading()
            self._process()

    # -- the server's interface --------------------------------------------------------------

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # -- reading -----------------------------------------------------------------------------

    def _pause_reading(self) -> None:
        if not self._read_paused and self._transport is not None:
            self._read_paused = True
            with contextlib.suppress(RuntimeError):
                self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._read_paused and self._transport is not None and not self._closing:
            self._read_paused = False
            with contextlib.suppress(RuntimeError):
                self._transport.resume_reading()

    def _process(self) -> None:
        """Parse and answer what the buffer holds, request after request."""
        while not self._closing and not self._busy and not self._write_paused:
            try:
                if self._pending is None and not self._read_head():
                    return
                body = self._read_body()
            except _Refuse as refused:
                path = self._pending[1] if self._pending is not None else ""
                self._refuse(path, refused)
                return
            if body is None:
                return
            assert self._pending is not None
            method, path, query, headers, close, head_only = self._pending
            self._pending = None
            self._body = None
            self._dispatch(Request(method, path, query, headers, body, self), close, head_only)

    def _read_head(self) -> bool:
        buffer = self._buffer
        if not buffer:
            return False
        if self.phase == "idle":
            # The first byte of the next request on a kept-alive connection.
            self.phase = "headers"
            self._deadline.arm(self._limits.header_timeout_s)
        end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
        if end < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                raise _Refuse(431, "head-too-large", f"request head over {MAX_HEAD_BYTES} bytes")
            return False
        head = bytes(buffer[:end])
        del buffer[: end + 4]
        method, path, query, version, headers = parse_head(head)
        connection = headers.get("connection", "").lower()
        close = version == "HTTP/1.0" or "close" in connection
        # The request is known from here: a refusal of its body names its path.
        self._pending = (method, path, query, headers, close, method == "HEAD")
        coding = headers.get("transfer-encoding")
        length_text = headers.get("content-length")
        if coding is not None:
            if length_text is not None:
                raise _Refuse(
                    400, "bad-length", "both Content-Length and Transfer-Encoding are set"
                )
            if coding.strip().lower() != "chunked":
                raise _Refuse(
                    400, "bad-coding", f"transfer coding {coding[:40]!r} is not supported"
                )
            self._body = _Body(None)
        else:
            length = _length(length_text) if length_text is not None else 0
            if length > self._limits.max_body_bytes:
                raise _Refuse(413, "body-too-large", "")
            self._body = _Body(length)
        expect = headers.get("expect")
        if expect is not None:
            if expect.strip().lower() != "100-continue":
                raise _Refuse(417, "bad-expect", f"Expect {expect[:40]!r} is not supported")
            if self._body.length != 0 and not buffer:
                self._transport.write(_CONTINUE)  # type: ignore[union-attr]
        self.phase = "body"
        self._deadline.arm(self._limits.body_timeout_s)
        return True

    def _read_body(self) -> bytes | None:
        """The whole body once it is here; ``None`` while it is still coming."""
        body = self._body
        assert body is not None
        buffer = self._buffer
        if body.length is not None:
            if len(buffer) < body.length:
                return None
            data = bytes(buffer[: body.length])
            del buffer[: body.length]
            return data
        cap = self._limits.max_body_bytes
        while True:
            if body.state == "size":
                end = buffer.find(b"\r\n", 0, MAX_CHUNK_LINE)
                if end < 0:
                    if len(buffer) >= MAX_CHUNK_LINE:
                        raise _Refuse(400, "bad-body", "chunk-size line too long")
                    return None
                text = bytes(buffer[:end]).split(b";", 1)[0].strip(b" \t").decode("latin-1")
                del buffer[: end + 2]
                if not text or len(text) > MAX_LENGTH_DIGITS or not _HEX.issuperset(text):
                    raise _Refuse(400, "bad-body", f"malformed chunk size {text[:32]!r}")
                size = int(text, 16)
                if size == 0:
                    body.state = "trailers"
                    continue
                body.size += size
                if body.size > cap:
                    raise _Refuse(413, "body-too-large", "")
                body.chunk_left = size
                body.state = "data"
            elif body.state == "data":
                take = min(body.chunk_left, len(buffer))
                if take == 0:
                    return None
                body.chunks.append(bytes(buffer[:take]))
                del buffer[:take]
                body.chunk_left -= take
                if body.chunk_left == 0:
                    body.state = "data-end"
            elif body.state == "data-end":
                if len(buffer) < 2:
                    return None
                if buffer[:2] != b"\r\n":
                    raise _Refuse(400, "bad-body", "chunk data not followed by CRLF")
                del buffer[:2]
                body.state = "size"
            else:  # trailers: lines until an empty one, read and dropped
                end = buffer.find(b"\r\n")
                if end < 0:
                    if body.trailer_bytes + len(buffer) > MAX_HEAD_BYTES:
                        raise _Refuse(431, "head-too-large", "trailers too large")
                    return None
                body.trailer_bytes += end + 2
                if body.trailer_bytes > MAX_HEAD_BYTES:
                    raise _Refuse(431, "head-too-large", "trailers too large")
                del buffer[: end + 2]
                if end == 0:
                    return b"".join(body.chunks)

    # -- answering ---------------------------------------------------------------------------

    def _dispatch(self, request: Request, close: bool, head_only: bool) -> None:
        self._deadline.cancel()
        self.phase = "request"
        try:
            result = self._server.route(request)
        except Exception:  # a bug in a handler: answer, log, keep serving
            log.exception("%s %s failed", request.method, request.path)
            result = Reply(500, b"internal error\n", "text/plain; charset=utf-8")
        if isinstance(result, Reply):
            self._send(result, close, head_only)
            return
        self._busy = True
        task = asyncio.ensure_future(result)
        task.add_done_callback(lambda t: self._finished(t, close, head_only))

    def _finished(self, task: asyncio.Future[Reply], close: bool, head_only: bool) -> None:
        self._busy = False
        if task.cancelled():
            reply = Reply(503, b"the server is stopping\n", "text/plain; charset=utf-8")
        elif task.exception() is not None:
            log.error("a handler failed", exc_info=task.exception())
            reply = Reply(500, b"internal error\n", "text/plain; charset=utf-8")
        else:
            reply = task.result()
        if self._closing:
            return  # the client is gone: the answer is dropped, the work was done
        self._send(reply, close, head_only)
        if not self._closing and not self._write_paused:
            self._resume_reading()
            self._process()

    def _send(self, reply: Reply, close: bool, head_only: bool = False) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        close = close or reply.close or self._eof
        transport.write(encode_reply(reply, close=close, head_only=head_only))
        if close:
            self._closing = True
            self.phase = "closing"
            self._deadline.arm(CLOSE_GRACE_S)
            transport.close()
            return
        self.phase = "idle"
        self._deadline.arm(self._limits.idle_timeout_s)

    def _refuse(self, path: str, refused: _Refuse) -> None:
        """Answer a request the server refused, and close unless the stream stays framed."""
        message = refused.message
        if refused.status == 413:
            message = (
                f"request body larger than {self._limits.max_body_bytes} bytes "
                "(server.max_body_bytes)"
            )
        self._pending = None
        self._body = None
        self._send(self._server.on_error(path, refused.status, refused.reason, message), True)

    # -- the deadline ------------------------------------------------------------------------

    def _expired(self) -> None:
        transport = self._transport
        if transport is None or (transport.is_closing() and self.phase != "closing"):
            return
        if self.phase == "body" and self._pending is not None:
            # As slow as a client that never sends it: say so, then close.
            self._refuse(
                self._pending[1],
                _Refuse(
                    408,
                    "body-timeout",
                    f"request body not received within {self._limits.body_timeout_s} s "
                    "(server.body_timeout_s)",
                ),
            )
            return
        self._guard.cut(transport, self.phase)


class HttpServer:
    """A listener: routes by path and method, connections guarded and bounded."""

    def __init__(
        self,
        routes: Mapping[str, Mapping[str, Handler]],
        guard: ConnectionGuard,
        limits: Limits,
        *,
        on_error: ErrorHook = plain_error,
    ) -> None:
        self.routes = routes
        self.guard = guard
        self.limits = limits
        self.on_error = on_error
        self.connections: set[HttpConnection] = set()
        self._server: asyncio.AbstractServer | None = None

    def route(self, request: Request) -> Reply | Awaitable[Reply]:
        """The handler's answer for *request*, or 404 / 405."""
        methods = self.routes.get(request.path)
        if methods is None:
            return Reply(404, b"404: Not Found", "text/plain; charset=utf-8")
        handler = methods.get(request.method)
        if handler is None and request.method == "HEAD":
            handler = methods.get("GET")
        if handler is None:
            allowed = ", ".join(sorted(methods))
            return Reply(
                405,
                b"405: Method Not Allowed",
                "text/plain; charset=utf-8",
                (("Allow", allowed),),
            )
        return handler(request)

    async def start(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        sock: socket.socket | None = None,
    ) -> int:
        """Listen on *host*:*port* (or accept on *sock*); the bound port."""
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {}
        if ssl_context is not None:
            # A client that stalls its handshake is as slow as one that stalls its headers.
            extra["ssl_handshake_timeout"] = self.limits.header_timeout_s
        if sock is not None:
            self._server = await loop.create_server(
                lambda: HttpConnection(self), sock=sock, ssl=ssl_context, **extra
            )
        else:
            self._server = await loop.create_server(
                lambda: HttpConnection(self), host, port, ssl=ssl_context, **extra
            )
        sockets = self._server.sockets or ()
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def close(self) -> None:
        """Stop accepting, and cut the connections still open."""
        if self._server is None:
            return
        self._server.close()
        for connection in list(self.connections):
            connection.abort()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await self._server.wait_closed()
        self._server = None

"""The bind's object calls on connections of our own (scheduler/apiwrite.py), against raw
servers that misbehave on purpose: closed keep-alives, chunks, oversize and silent answers,
TLS with our own CA. The happy path runs in every scheduler test (the fake API server)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from sched_helpers import make_certificates

from xpushare.scheduler import apiwrite
from xpushare.scheduler.apiwrite import ApiWriter, WireError, ssl_context

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


async def _request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    body = await reader.readexactly(length) if length else b""
    return head + body


class RawServer:
    def __init__(self, handler: Handler, context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.context = context
        self.connections = 0
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawServer:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handler(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        self._server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=self.context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"{'https' if self.context else 'http'}://127.0.0.1:{port}"


@pytest.fixture
async def keepalive() -> AsyncIterator[RawServer]:
    server: RawServer

    async def answer_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            server.requests.append(await _request(reader))
            writer.write(OK)

    server = RawServer(answer_all)
    async with server:
        yield server


async def test_requests_share_one_connection_and_carry_the_callers_headers(
    keepalive: RawServer,
) -> None:
    writer = ApiWriter(keepalive.url)
    for _ in range(3):
        status, body = await writer.request(
            "PATCH",
            keepalive.url + "/api/v1/nodes/n1",
            {"Authorization": "Bearer t0k", "Content-Type": "application/merge-patch+json"},
            b'{"a":1}',
        )
        assert (status, body) == (200, b'{"ok":true}')
    assert keepalive.connections == 1 and writer.opened == 1
    first = keepalive.requests[0]
    assert first.startswith(b"PATCH /api/v1/nodes/n1 HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer t0k\r\n" in first
    assert b"\r\nContent-Length: 7\r\n" in first and first.endswith(b'{"a":1}')
    await writer.close()


async def test_a_keepalive_the_server_closed_is_retried_on_a_new_connection() -> None:
    async def one_answer_then_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await _request(reader)
        writer.write(OK)  # no "Connection: close": the client learns only by trying
        await writer.drain()

    async with RawServer(one_answer_then_close) as server:
        writer = ApiWriter(server.url)
        assert (await writer.request("GET", server.url + "/x", {}, None))[0] == 200
        await asyncio.sleep(0.05)
        assert (await writer.request("GET", server.url + "/x", {}, None))[0] == 200
        assert server.connections == 2 and writer.opened == 2
        await writer.close()


async def test_an_answer_cut_short_is_an_error_not_a_retry() -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n{")
        await writer.drain()

    async with RawServer(half) as server:
        writer = ApiWriter(server.url)
        with pytest.raises(WireError):
            await writer.request("POST", server.url + "/binding", {}, b"{}")
        assert server.connections == 1  # the server may have acted: never sent twice


async def test_chunked_answers_with_trailers() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'4\r\n{"a"\r\n5;ext=1\r\n:12}\n\r\n0\r\nX-Trailer: 1\r\n\r\n'
        )
        await writer.drain()

    async with RawServer(chunked) as server:
        writer = ApiWriter(server.url)
        status, body = await writer.request("GET", server.url + "/", {}, None)
        assert (status, body) == (200, b'{"a":12}\n')
        await writer.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n", "at most"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\n\r\n", "neither Content-Length"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * (70 * 1024) + b"\r\n\r\n", "headers longer"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
    ],
)
async def test_malformed_or_oversized_answers_are_refused(answer: bytes, message: str) -> None:
    async def bad(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(answer)
        await writer.drain()
        await asyncio.sleep(1)

    async with RawServer(bad) as server:
        with pytest.raises(WireError, match=message):
            await ApiWriter(server.url, timeout_s=5).request("GET", server.url + "/", {}, None)


async def test_a_silent_server_times_out() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        await asyncio.sleep(10)

    async with RawServer(silent) as server:
        with pytest.raises(WireError, match=r"no answer within 0\.2 s"):
            await ApiWriter(server.url, timeout_s=0.2).request("GET", server.url + "/", {}, None)


async def test_a_header_with_a_line_break_is_never_sent(keepalive: RawServer) -> None:
    writer = ApiWriter(keepalive.url)
    with pytest.raises(WireError, match="line break"):
        await writer.request("GET", keepalive.url + "/", {"X": "a\r\nInjected: 1"}, None)
    assert keepalive.requests == []


async def test_tls_with_the_configurations_ca(tmp_path: Path) -> None:
    ca, cert, key = make_certificates(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(OK)
        await writer.drain()

    class Configuration:  # the fields of kubernetes.client.Configuration it reads
        ssl_ca_cert = str(ca)
        cert_file = None
        key_file = None
        verify_ssl = True

    async with RawServer(answer, server_context) as server:
        writer = ApiWriter(server.url, context=ssl_context(Configuration()))
        assert (await writer.request("GET", server.url + "/", {}, None))[0] == 200
        await writer.close()
        # A client that does not trust the CA is refused by its own TLS check.
        with pytest.raises(WireError, match="CERTIFICATE_VERIFY_FAILED"):
            await ApiWriter(server.url).request("GET", server.url + "/", {}, None)


def test_writer_is_not_used_with_a_proxy() -> None:
    class Configuration:
        host = "https://10.0.0.1:6443"
        proxy = "http://proxy:3128"

    assert apiwrite.writer_for(Configuration(), 5.0) is None
    assert ApiWriter("https://10.0.0.1:6443").serves("https://10.0.0.1:6443/api/v1/nodes/x")
    assert not ApiWriter("https://10.0.0.1:6443").serves("https://10.0.0.1:64430/api")

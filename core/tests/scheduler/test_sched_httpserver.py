"""The scheduler's own HTTP/1.1 server (scheduler/httpserver.py) over real sockets.

What kube-scheduler and the API server send is plain (Content-Length, keep-alive); what a
hostile or unusual client sends must still get an answer in order or a clean refusal:
pipelined requests, chunked bodies with extensions and trailers, ``Expect: 100-continue``,
lying or doubled framing, heads past the bound, HTTP/1.0, HEAD, unknown methods. The
listeners' timeouts and caps are tested through the scheduler (test_sched_slow_clients.py)
and the whole surface by the fuzzer (test_sched_fuzz.py).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest

from xpushare.scheduler.connections import ConnectionGuard, ConnectionLimits
from xpushare.scheduler.httpserver import (
    MAX_HEAD_BYTES,
    HttpServer,
    Limits,
    Reply,
    Request,
)

#: What the async handler has seen finish, even after its client went away.
FINISHED: list[bytes] = []


def _echo(request: Request) -> Reply:
    return Reply(200, b"echo:" + request.body)


def _boom(request: Request) -> Reply:
    raise RuntimeError("a handler bug")


async def _slow(request: Request) -> Reply:
    await asyncio.sleep(0.2)
    FINISHED.append(request.body)
    return Reply(200, b"slow:" + request.body)


@pytest.fixture
async def server() -> AsyncIterator[int]:
    guard = ConnectionGuard(
        "test", ConnectionLimits(header_timeout_s=2, idle_timeout_s=5, max_connections=10)
    )
    listener = HttpServer(
        {
            "/echo": {"POST": _echo},
            "/get": {"GET": _echo},
            "/slow": {"POST": _slow},
            "/boom": {"POST": _boom},
        },
        guard,
        Limits(header_timeout_s=2, body_timeout_s=2, idle_timeout_s=5, max_body_bytes=1024),
    )
    port = await listener.start("127.0.0.1", 0)
    yield port
    await listener.close()


async def _exchange(port: int, raw: bytes, answers: int) -> list[tuple[int, dict[str, str], bytes]]:
    """Send *raw*, read *answers* answers: (status, headers, body) each."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        out = []
        async with asyncio.timeout(10):
            for _ in range(answers):
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split(" ")[1])
                if status == 100:
                    head = await reader.readuntil(b"\r\n\r\n")
                    lines = head.decode("latin-1").split("\r\n")
                    status = int(lines[0].split(" ")[1])
                    out.append((100, {}, b""))
                headers = {
                    k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)
                }
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                out.append((status, headers, body))
        return out
    finally:
        writer.close()


async def _closed(port: int, raw: bytes) -> tuple[int, bytes]:
    """Send *raw*; the status of the answer and whether the server closed after it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        async with asyncio.timeout(10):
            data = await reader.read()  # until the server closes
        return int(data.split(b" ", 2)[1]), data
    finally:
        writer.close()


def _post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def test_pipelined_requests_are_answered_in_order_sync_and_async(server: int) -> None:
    raw = _post("/slow", b"1") + _post("/echo", b"2") + _post("/slow", b"3") + _post("/echo", b"4")
    answers = await _exchange(server, raw, 4)
    assert [a[2] for a in answers] == [b"slow:1", b"echo:2", b"slow:3", b"echo:4"]
    assert all(a[0] == 200 and "date" in a[1] for a in answers)


async def test_a_chunked_body_with_extensions_and_trailers(server: int) -> None:
    raw = (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;name=value\r\nabc\r\n"
        b"2\r\nde\r\n"
        b"0\r\nX-Trailer: 1\r\n\r\n"
    ) + _post("/echo", b"next")
    answers = await _exchange(server, raw, 2)
    assert [a[2] for a in answers] == [b"echo:abcde", b"echo:next"]


async def test_expect_100_continue_is_answered_before_the_body(server: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    try:
        writer.write(b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        async with asyncio.timeout(10):
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"ok")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert await reader.readexactly(7) == b"echo:ok"
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        # Both framings: which one a proxy in front believed is how requests are smuggled.
        (_post("/echo", b"abc", "Transfer-Encoding: chunked"), 400),
        (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 3, 4\r\n\r\nabcd", 400),
        (b"POST /echo HTTP/1.1\r\nContent-Length: -3\r\n\r\nabc", 400),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 2000\r\n\r\n", 413),
        (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n401\r\n", 413),
        (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", 400),
        (b"POST /echo HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 0\r\n\r\n", 417),
        (b"POST /echo HTTP/2.0\r\n\r\n", 400),
        (b"POST  /echo HTTP/1.1\r\n\r\n", 400),
        (b"POST echo HTTP/1.1\r\n\r\n", 400),
        (b"POST /echo HTTP/1.1\r\nBad Header: x\r\n\r\n", 400),
        (b"POST /echo HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n", 400),
        (b"POST /echo HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400),
        (b"POST /echo HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n", 431),
        (b"POST /echo HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD_BYTES + 10), 431),
    ],
)
async def test_bad_framing_is_refused_and_the_connection_closed(
    server: int, raw: bytes, status: int
) -> None:
    got, _ = await _closed(server, raw + _post("/echo", b"never"))
    assert got == status


async def test_http_1_0_is_answered_then_closed_and_head_has_no_body(server: int) -> None:
    got, data = await _closed(server, b"POST /echo HTTP/1.0\r\nContent-Length: 1\r\n\r\nx")
    assert got == 200 and data.endswith(b"echo:x")
    got, data = await _closed(server, _post("/echo", b"y", "Connection: close"))
    assert got == 200 and b"Connection: close" in data
    got, data = await _closed(server, b"HEAD /get HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert got == 200 and b"Content-Length: 5\r\n" in data and data.endswith(b"\r\n\r\n")


async def test_unknown_paths_methods_and_handler_bugs_keep_the_connection(server: int) -> None:
    raw = (
        b"GET /echo HTTP/1.1\r\n\r\n"
        + _post("/nowhere", b"")
        + _post("/boom", b"x")
        + _post("/echo", b"still here")
    )
    answers = await _exchange(server, raw, 4)
    assert [a[0] for a in answers] == [405, 404, 500, 200]
    assert answers[0][1]["allow"] == "POST"
    assert answers[-1][2] == b"echo:still here"


async def test_a_client_gone_mid_request_does_not_cancel_the_handler(server: int) -> None:
    FINISHED.clear()
    _, writer = await asyncio.open_connection("127.0.0.1", server)
    writer.write(_post("/slow", b"left"))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()
    await asyncio.sleep(0.4)
    assert FINISHED == [b"left"]
    # And the server still serves others.
    assert (await _exchange(server, _post("/echo", b"z"), 1))[0][2] == b"echo:z"


async def test_a_slow_body_is_a_408_and_closed(server: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    try:
        writer.write(b"POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        async with asyncio.timeout(10):
            data = await reader.read()
        assert data.startswith(b"HTTP/1.1 408 ")
        assert re.search(rb"server\.body_timeout_s", data)
    finally:
        writer.close()


async def test_a_client_that_half_closes_after_its_request_gets_the_answer(server: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    try:
        writer.write(_post("/slow", b"half"))
        await writer.drain()
        writer.write_eof()
        async with asyncio.timeout(10):
            data = await reader.read()  # the answer, then the server's close
        assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"slow:half")
        assert b"Connection: close" in data
    finally:
        writer.close()

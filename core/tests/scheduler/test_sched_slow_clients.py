"""Slow and greedy clients over real sockets on loopback: bounded, and no one else waits.

Clients that trickle their headers or their body, keep-alive connections left idle, TLS
handshakes that never finish, and more connections than the cap. The timeouts are set small
here (fractions of a second) so each test ends in a few seconds; every client loop is
bounded (``TRICKLE_STEPS``), so a server that never closes fails the test, it does not hang.
"""

from __future__ import annotations

import asyncio
import re
import resource
import socket
import ssl
import subprocess
import sys

from sched_helpers import add_nodes, create_pod, filter_args, gpu_pod, make_certificates

#: Small timeouts: closing must follow them, far inside the clients' own bounded loops.
FAST = {
    "server.header_timeout_s": 0.5,
    "server.body_timeout_s": 1.0,
    "server.idle_timeout_s": 1.0,
    "server.max_connections": 400,
}
#: A trickling client sends one byte per step and gives up after this many steps (10 s):
#: 20 times the timeouts above, so only a server that never closes reaches the end.
TRICKLE_STEPS = 200
TRICKLE_PAUSE_S = 0.05
#: Concurrent slow clients, as in the report of issue 13.
SLOW_CLIENTS = 300


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def connect(port: int, context: ssl.SSLContext | None = None):
    return await asyncio.open_connection("127.0.0.1", port, ssl=context)


async def read_all(reader: asyncio.StreamReader) -> bytes:
    """Everything until the server closes (EOF or reset)."""
    data = b""
    try:
        while chunk := await reader.read(65536):
            data += chunk
    except (ConnectionError, ssl.SSLError):
        pass
    return data


async def trickle(port: int, head: bytes, byte: bytes) -> tuple[bool, bytes]:
    """Send *head*, then *byte* once per step until the server closes; (closed, what came)."""
    reader, writer = await connect(port)
    received = asyncio.create_task(read_all(reader))
    try:
        writer.write(head)
        for _ in range(TRICKLE_STEPS):
            done, _ = await asyncio.wait({received}, timeout=TRICKLE_PAUSE_S)
            if done:
                return True, received.result()
            try:
                writer.write(byte)
                await writer.drain()
            except ConnectionError:
                return True, await received
        return False, b""
    finally:
        received.cancel()
        writer.close()


async def request(reader, writer, raw: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 exchange on an open connection: (status, body)."""
    writer.write(raw)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status = int(head.split(b" ", 2)[1])
    match = re.search(rb"(?i)content-length: *(\d+)", head)
    body = await reader.readexactly(int(match.group(1))) if match else b""
    return status, body


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


async def metric(http, sched, name: str, **labels: str) -> float:
    """One series of the scheduler's /metrics (0 when absent)."""
    async with http.get(f"{sched.metrics_url or sched.url}/metrics") as r:
        text = await r.text()
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        base, _, rest = series.partition("{")
        found = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if base == name and found == labels:
            return float(value)
    return 0.0


async def served_meanwhile(http, sched, want, stop: asyncio.Event) -> list[int]:
    """Good /filter requests, one after the other, until *stop* (at most 200)."""
    statuses = []
    for _ in range(200):
        if stop.is_set():
            break
        async with http.post(f"{sched.url}/filter", json=filter_args(want, ["node-0"])) as r:
            statuses.append(r.status)
            assert (await r.json())["NodeNames"] == ["node-0"]
        await asyncio.sleep(0.02)
    return statuses


async def test_300_clients_trickling_headers_are_closed_and_others_are_served(
    api, scheduler_factory, http
):
    sched = await scheduler_factory(**FAST)
    add_nodes(api, 1)
    want = create_pod(api, gpu_pod("want", gpu="1"))
    await sched.settle(api)
    port = sched.scheduler.ports["main"]
    stop = asyncio.Event()
    good = asyncio.create_task(served_meanwhile(http, sched, want, stop))
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nX-Slow: "
    results = await asyncio.gather(*(trickle(port, head, b"a") for _ in range(SLOW_CLIENTS)))
    stop.set()
    statuses = await good
    assert all(closed for closed, _ in results), sum(not c for c, _ in results)
    # Closed without an answer: they never finished a request.
    assert all(data == b"" for _, data in results)
    assert statuses and set(statuses) == {200}
    closed = await metric(
        http,
        sched,
        "xpushare_scheduler_connections_closed_total",
        listener="main",
        reason="header-timeout",
    )
    assert closed == SLOW_CLIENTS


async def test_300_clients_trickling_bodies_get_408_and_are_closed(api, scheduler_factory, http):
    sched = await scheduler_factory(**FAST)
    add_nodes(api, 1)
    want = create_pod(api, gpu_pod("want", gpu="1"))
    await sched.settle(api)
    port = sched.scheduler.ports["main"]
    stop = asyncio.Event()
    good = asyncio.create_task(served_meanwhile(http, sched, want, stop))
    head = (
        b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n{"
    )
    results = await asyncio.gather(*(trickle(port, head, b" ") for _ in range(SLOW_CLIENTS)))
    stop.set()
    statuses = await good
    assert all(closed for closed, _ in results), sum(not c for c, _ in results)
    assert all(data.startswith(b"HTTP/1.1 408 ") for _, data in results), {
        data[:40] for _, data in results
    }
    assert all(b"server.body_timeout_s" in data for _, data in results)
    assert statuses and set(statuses) == {200}
    failures = await metric(
        http, sched, "xpushare_scheduler_failures_total", verb="filter", reason="body-timeout"
    )
    assert failures == SLOW_CLIENTS


async def test_idle_and_silent_connections_are_closed_busy_ones_kept(api, scheduler_factory):
    sched = await scheduler_factory(**FAST)
    port = sched.scheduler.ports["main"]
    # Silent from the start: closed after the header timeout.
    reader, writer = await connect(port)
    assert await asyncio.wait_for(read_all(reader), 10) == b""
    writer.close()
    # Busy: a request every 0.2 s for 3 s, three idle timeouts in all, on one connection.
    reader, writer = await connect(port)
    for _ in range(15):
        assert await request(reader, writer, HEALTHZ) == (200, b"ok")
        await asyncio.sleep(0.2)
    # Then idle: closed after the idle timeout.
    assert await asyncio.wait_for(read_all(reader), 10) == b""
    writer.close()


async def test_the_connection_cap_refuses_newcomers_and_serves_the_connected(
    api, scheduler_factory, http
):
    cap = 20
    sched = await scheduler_factory(
        **{
            "server.max_connections": cap,
            # The probes' listener, on a port of its own.
            "server.metrics_port": free_port(),
            "server.header_timeout_s": 30,
            "server.idle_timeout_s": 30,
        }
    )
    port = sched.scheduler.ports["main"]
    connected = [await connect(port) for _ in range(cap)]
    for reader, writer in connected:
        assert await request(reader, writer, HEALTHZ) == (200, b"ok")
    # Past the cap: answered 503 and closed at once, without a request being read.
    for _ in range(10):
        reader, writer = await connect(port)
        data = await asyncio.wait_for(read_all(reader), 10)
        writer.close()
        assert data.startswith(b"HTTP/1.1 503 "), data
        assert b"server.max_connections=20" in data
    # The connected clients are still served, and the probes' listener has its own budget.
    for reader, writer in connected:
        assert await request(reader, writer, HEALTHZ) == (200, b"ok")
    async with http.get(f"{sched.metrics_url}/healthz") as r:
        assert r.status == 200
    refused = await metric(
        http,
        sched,
        "xpushare_scheduler_connections_closed_total",
        listener="main",
        reason="over-capacity",
    )
    assert refused == 10
    # Room again once some leave.
    for _, writer in connected[:5]:
        writer.close()
    for _ in range(200):
        if await metric(http, sched, "xpushare_scheduler_connections", listener="main") <= 15:
            break
        await asyncio.sleep(0.02)
    reader, writer = await connect(port)
    assert await request(reader, writer, HEALTHZ) == (200, b"ok")
    writer.close()
    for _, writer in connected[5:]:
        writer.close()


async def test_a_stalled_tls_handshake_is_closed(api, scheduler_factory, tmp_path):
    ca, cert, key = make_certificates(tmp_path)
    sched = await scheduler_factory(
        **FAST, **{"tls.cert_file": str(cert), "tls.key_file": str(key)}
    )
    port = sched.scheduler.ports["main"]
    # Plain TCP to the TLS port, no ClientHello: the handshake never starts.
    reader, writer = await connect(port)
    assert await asyncio.wait_for(read_all(reader), 10) == b""
    writer.close()
    # A real TLS client is served.
    context = ssl.create_default_context(cafile=str(ca))
    reader, writer = await connect(port, context)
    assert await request(reader, writer, HEALTHZ) == (200, b"ok")
    writer.close()


def test_the_open_file_limit_is_raised_to_what_the_caps_need():
    """In a child process started with a soft limit of 256 (as a container runtime may)."""
    script = (
        "import resource, sys\n"
        "from xpushare.scheduler.connections import ensure_descriptors\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "print(ensure_descriptors(1000), resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    granted, now, hard = (int(v) for v in result.stdout.split())
    expected = 1000 if hard in (-1, resource.RLIM_INFINITY) or hard >= 1000 else hard
    assert granted == now == expected

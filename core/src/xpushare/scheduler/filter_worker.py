"""A filter worker process (``python -m xpushare.scheduler.filter_worker``): its own
watches, /filter and /prioritize on the socket the leader bound, and the stream of the
leader's reservations (scheduler/workers.py says why workers exist and how they stay safe).

Its own module, imported by nothing: running it does not import a module a second time,
and the leader's side (workers.py, which the scheduler's app imports) never imports the app
this process builds, so the two do not import each other.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

from xpushare.errors import XpushareError
from xpushare.scheduler.eventloop import run
from xpushare.scheduler.workers import (
    MAX_LINE_BYTES,
    SYNCED,
    ReservationMirror,
)

if TYPE_CHECKING:
    from xpushare.scheduler.config import SchedulerConfig

log = logging.getLogger(__name__)


async def _follow(mirror: ReservationMirror, reader: asyncio.StreamReader) -> None:
    """Apply the stream until the leader process closes it."""
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            return
        except asyncio.LimitOverrunError as exc:
            raise XpushareError(
                f"the leader sent a reservation line over {MAX_LINE_BYTES} bytes: {exc}"
            ) from None
        try:
            mirror.apply(line)
        except (ValueError, XpushareError) as exc:
            # The leader encoded it; a line we cannot read is a bug, never a reason to stop.
            log.error("filter worker: ignoring a reservation message: %s", exc)


async def _sweep_loop(mirror: ReservationMirror) -> None:
    while True:
        await asyncio.sleep(min(60.0, mirror.ttl_s / 4))
        released = mirror.sweep()
        if released:
            log.warning("filter worker: %d mirrored reservations aged out", released)


async def _announce(scheduler: Any, writer: asyncio.StreamWriter) -> None:
    """Tell the leader once this worker's caches are listed (its readiness waits for it)."""
    while True:
        with contextlib.suppress(TimeoutError):
            await scheduler.wait_synced(timeout_s=60.0)
            break
    writer.write(SYNCED)
    await writer.drain()
    await asyncio.Event().wait()  # done; stays pending so it never ends the worker


async def serve(config: SchedulerConfig, listen: socket.socket, mirror_sock: socket.socket) -> None:
    """A worker's life: its own watches, /filter and /prioritize on *listen*, the stream."""
    from xpushare.plugins import PluginHost
    from xpushare.scheduler.app import Scheduler
    from xpushare.scheduler.kube import Kube, kube_settings

    kube = await Kube.connect(kube_settings(config.kube))
    host = PluginHost.from_environment(vendor_config=config.vendors)
    scheduler = Scheduler(config, host=host, kube=kube, worker=True)
    mirror = ReservationMirror(scheduler.ledger)
    reader, writer = await asyncio.open_unix_connection(sock=mirror_sock, limit=MAX_LINE_BYTES)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks: list[asyncio.Task[Any]] = []
    try:
        await scheduler.start(listen_sock=listen)
        tasks = [
            asyncio.create_task(_announce(scheduler, writer), name="announce-synced"),
            asyncio.create_task(_follow(mirror, reader), name="reservations"),
            asyncio.create_task(_sweep_loop(mirror), name="reservation-sweep"),
            asyncio.create_task(stop.wait(), name="signals"),
        ]
        # The first to end ends the worker: a signal, or the leader's end of the stream.
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        writer.close()
        await scheduler.stop()
        await kube.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m xpushare.scheduler.filter_worker",
        description="A filter worker of `xpushare scheduler` (started by it; not run by hand). "
        "Reads the scheduler's configuration as JSON on standard input.",
    )
    parser.add_argument(
        "--listen-fd", type=int, required=True, help="listening socket to accept on"
    )
    parser.add_argument("--mirror-fd", type=int, required=True, help="the leader's reservations")
    parser.add_argument("--index", type=int, default=0, help="the worker's number, for logs")
    args = parser.parse_args(argv)
    from xpushare.scheduler.config import SchedulerConfig

    config = SchedulerConfig.model_validate_json(sys.stdin.buffer.read())
    logging.basicConfig(
        level=config.log_level.upper(),
        format=f"%(asctime)s filter-worker-{args.index}[{os.getpid()}] %(levelname)s %(message)s",
    )
    listen = socket.socket(fileno=args.listen_fd)
    mirror_sock = socket.socket(fileno=args.mirror_fd)
    try:
        run(serve(config, listen, mirror_sock), config.server.event_loop)
    except Exception as exc:  # one line for the operator; the trace for a developer
        log.error(
            "filter worker %d stopped: %s: %s (its leader starts it again; the same "
            "configuration as the scheduler's, kube.* included, must work here)",
            args.index,
            type(exc).__name__,
            exc,
        )
        log.debug("filter worker %d stopped", args.index, exc_info=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

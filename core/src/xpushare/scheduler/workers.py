"""Filter workers: processes beside the leader that answer /filter and /prioritize.

Why: one Python process runs on one core, and a pod costs the extender some 6-8 ms of it
(docs/benchmarks.md): the scheduling cycle (/filter, /prioritize: per-node work over 500
candidates) and the binding cycle (/bind: the handoff, the Binding, the event, and the watch
events they cause). kube-scheduler runs the two cycles concurrently (one pod's bind while the
next pod is filtered), so with ``server.filter_workers`` they run in different processes, on
different cores: the leader keeps /bind and the webhook on ``server.port``; each worker
follows the API server's watches into its own copy of the cluster state and answers /filter
and /prioritize on ``server.filter_port``, accepting on one listening socket the leader bound
(one port, whatever the number of workers; the kernel gives each connection to one of them).
kube-scheduler is configured with two extenders (the chart does it): the workers' for filter
and prioritize, the leader's for bind.

Why no interleaving can double-book: a worker only answers questions. Every allocation is
still decided and reserved by the leader's /bind against the leader's own ledger, with no
await between the decision and the reservation (extender.py), and committed by fenced writes
(docs/scheduler.md, "Fencing"). A worker that is behind can at worst name a node that no
longer fits; that bind is refused ("no-fit") and kube-scheduler tries the pod again, as it
does when its own cache is behind. To keep that rare, the leader streams every reservation it
makes or drops to its workers the moment it makes it, before any API write
(``UsageLedger.on_reservation``), so a worker counts a slice as soon as the leader does, long
before the pod's watch event arrives. A mirrored reservation the watch has not replaced ages
out after ``RESERVATION_TTL_S`` (the leader's bind has settled by then, one way or the
other), so a message that arrives after its pod was deleted cannot hold a slice for good.

Faults: a worker that exits is started again (backoff 0.5 s doubling to 30 s) and first
receives every reservation in force; a worker that stops reading (stalled) is killed once
``MIRROR_BUFFER_LIMIT`` bytes wait for it, and started again; a worker whose leader process
is gone (its end of the stream closes) exits. Followers run workers too, unready with their
pod (the readiness probe is the leader's), so a new leader's workers are warm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import time
from typing import TYPE_CHECKING

import orjson

from xpushare.codec import decode_assignment, encode_assignment

if TYPE_CHECKING:
    from xpushare.scheduler.config import SchedulerConfig
    from xpushare.scheduler.metrics import SchedulerMetrics
    from xpushare.scheduling import UsageLedger
    from xpushare.scheduling.ledger import PodEntry

log = logging.getLogger(__name__)

#: A mirrored reservation lives at most this long without the leader's release or the pod's
#: watch event: longer than any bind (bind.wait_s is at most 300 s, plus the API calls'
#: timeouts) so a live bind's slice is never freed early in a worker.
RESERVATION_TTL_S = 600.0
#: Bytes of stream a worker may leave unread before it is deemed stalled and restarted:
#: some 10,000 reservations (an assignment is a few hundred bytes), far past any burst.
MIRROR_BUFFER_LIMIT = 4 * 1024 * 1024
#: The longest stream line a worker reads: an assignment of many devices and containers fits
#: many times over; anything longer is a bug, refused rather than buffered.
MAX_LINE_BYTES = 1024 * 1024
#: At most this many mirrored reservations are kept (the leader's own are bounded by the
#: binds in flight); past it the oldest is dropped, and the worker's answers are only staler.
MAX_MIRRORED = 100_000
RESTART_FIRST_S = 0.5
RESTART_MAX_S = 30.0
#: A worker that ran this long before it exited is restarted at once (backoff reset).
HEALTHY_RUN_S = 60.0
STOP_GRACE_S = 5.0
#: What a worker says on the stream once it has listed nodes and pods.
SYNCED = b"synced\n"


def _line(key: str, entry: PodEntry | None) -> bytes:
    if entry is None or entry.assignment is None:
        return orjson.dumps({"op": "release", "key": key}) + b"\n"
    return (
        orjson.dumps(
            {
                "op": "reserve",
                "key": key,
                "assignment": encode_assignment(entry.assignment, pod=key),
                "cpu_milli": entry.cpu_milli,
                "memory_mib": entry.memory_mib,
                "namespace": entry.namespace,
            }
        )
        + b"\n"
    )


class _Worker:
    __slots__ = ("index", "process", "reader", "synced", "writer")

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: asyncio.subprocess.Process | None = None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        #: The worker said it has listed nodes and pods (its answers are worth having).
        self.synced = False


class FilterWorkers:
    """The leader's side: starts the workers, streams reservations, restarts the fallen."""

    def __init__(
        self,
        config: SchedulerConfig,
        ledger: UsageLedger,
        metrics: SchedulerMetrics,
        *,
        argv: list[str] | None = None,
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.metrics = metrics
        #: How a worker is started (tests and the benchmark may name another interpreter).
        self.argv = argv or [sys.executable, "-m", "xpushare.scheduler.filter_worker"]
        self._workers = [_Worker(i) for i in range(config.server.filter_workers)]
        self._listen: socket.socket | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.port = 0

    @property
    def alive(self) -> int:
        return sum(1 for w in self._workers if w.writer is not None)

    @property
    def synced(self) -> bool:
        """Every worker runs and has listed the cluster (the leader's readiness needs it:
        kube-scheduler's /filter goes to the workers)."""
        return all(w.writer is not None and w.synced for w in self._workers)

    def describe(self) -> str:
        ready = sum(1 for w in self._workers if w.writer is not None and w.synced)
        return f"{ready} of {len(self._workers)} filter workers ready"

    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers if w.process is not None]

    async def start(self) -> int:
        """Bind the workers' port, start them; the port (useful with port 0)."""
        server = self.config.server
        listen = socket.create_server(
            (server.host, server.filter_port), backlog=1024, reuse_port=False
        )
        listen.set_inheritable(True)
        self._listen = listen
        self.port = int(listen.getsockname()[1])
        self.ledger.on_reservation = self._mirror
        for worker in self._workers:
            self._tasks.append(
                asyncio.create_task(self._supervise(worker), name=f"filter-worker-{worker.index}")
            )
        return self.port

    async def stop(self) -> None:
        self._stopping = True
        self.ledger.on_reservation = None
        for worker in self._workers:
            if worker.process is not None and worker.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.terminate()
        for worker in self._workers:
            if worker.process is not None:
                try:
                    async with asyncio.timeout(STOP_GRACE_S):
                        await worker.process.wait()
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        worker.process.kill()
                    await worker.process.wait()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        for worker in self._workers:
            if worker.writer is not None:
                worker.writer.close()
                worker.writer = None
        if self._listen is not None:
            self._listen.close()
            self._listen = None

    # -- the stream ---------------------------------------------------------------------------

    def _mirror(self, key: str, entry: PodEntry | None) -> None:
        """``UsageLedger.on_reservation``: send the change to every live worker, now."""
        line = _line(key, entry)
        for worker in self._workers:
            self._send(worker, line)

    def _send(self, worker: _Worker, line: bytes) -> None:
        writer = worker.writer
        if writer is None:
            return  # it gets every reservation in force when it (re)starts
        if writer.transport.get_write_buffer_size() > MIRROR_BUFFER_LIMIT:
            log.error(
                "filter worker %d (pid %s) has not read %d bytes of reservations: "
                "it is stalled; killing it (it is started again)",
                worker.index,
                worker.process.pid if worker.process else "?",
                writer.transport.get_write_buffer_size(),
            )
            worker.writer = None
            writer.transport.abort()
            if worker.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()
            return
        writer.write(line)

    # -- processes ----------------------------------------------------------------------------

    async def _spawn(self, worker: _Worker) -> asyncio.subprocess.Process:
        assert self._listen is not None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            theirs.set_inheritable(True)
            listen_fd, mirror_fd = self._listen.fileno(), theirs.fileno()
            process = await asyncio.create_subprocess_exec(
                *self.argv,
                "--listen-fd",
                str(listen_fd),
                "--mirror-fd",
                str(mirror_fd),
                "--index",
                str(worker.index),
                stdin=asyncio.subprocess.PIPE,
                pass_fds=(listen_fd, mirror_fd),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        assert process.stdin is not None
        process.stdin.write(self.config.model_dump_json().encode())
        with contextlib.suppress(ConnectionError):
            await process.stdin.drain()
        process.stdin.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        # No await from here to the registration: every reservation made from now on is
        # sent, and every one made before is in this snapshot.
        for entry in self.ledger.entries():
            if entry.reserved:
                writer.write(_line(entry.key, entry))
        worker.process, worker.reader, worker.writer = process, reader, writer
        worker.synced = False
        return process

    async def _hear(self, worker: _Worker) -> None:
        """The worker's few words back: "synced" once its caches are listed."""
        reader = worker.reader
        assert reader is not None
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                line = await reader.readuntil(b"\n")
                if line == SYNCED:
                    worker.synced = True
                    log.info("filter worker %d has listed the cluster", worker.index)

    async def _supervise(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while not self._stopping:
            started = loop.time()
            try:
                process = await self._spawn(worker)
            except (OSError, ValueError) as exc:
                log.error("cannot start filter worker %d: %s", worker.index, exc)
                returncode: int | None = None
            else:
                self.metrics.filter_workers.set(self.alive)
                hearing = asyncio.create_task(self._hear(worker))
                returncode = await process.wait()
                hearing.cancel()
            worker.synced = False
            if worker.writer is not None:
                worker.writer.close()
                worker.writer = None
            self.metrics.filter_workers.set(self.alive)
            if self._stopping:
                return
            failures = 1 if loop.time() - started > HEALTHY_RUN_S else failures + 1
            delay = min(RESTART_MAX_S, RESTART_FIRST_S * 2 ** (failures - 1))
            self.metrics.filter_worker_restarts.inc()
            log.error(
                "filter worker %d exited (%s); starting it again in %.1f s",
                worker.index,
                f"exit status {returncode}" if returncode is not None else "did not start",
                delay,
            )
            await asyncio.sleep(delay)


class ReservationMirror:
    """The worker's side of the stream: the leader's reservations, in the worker's ledger."""

    def __init__(self, ledger: UsageLedger, *, ttl_s: float = RESERVATION_TTL_S) -> None:
        self.ledger = ledger
        self.ttl_s = ttl_s
        #: Mirrored reservations and when they age out (insertion order: oldest first).
        self._deadlines: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._deadlines)

    def apply(self, line: bytes, now: float | None = None) -> None:
        """One line of the stream; a malformed one raises ``ValueError``."""
        message = orjson.loads(line)
        if not isinstance(message, dict):
            raise ValueError("a reservation message must be a JSON object")
        op, key = message.get("op"), message.get("key")
        if not isinstance(key, str) or not key or len(key) > 1024:
            raise ValueError("a reservation message needs a pod key of 1-1,024 characters")
        if op == "release":
            self._deadlines.pop(key, None)
            self.ledger.release(key)
            return
        if op != "reserve":
            raise ValueError(f"unknown reservation message {op!r}")
        existing = self.ledger.entry(key)
        if existing is not None and not existing.reserved:
            return  # the pod's watch event came first: it is counted as bound already
        value, cpu, memory = (message.get(k) for k in ("assignment", "cpu_milli", "memory_mib"))
        if not isinstance(value, str):
            raise ValueError(f"reservation of {key}: the assignment must be a string")
        if not (type(cpu) is int and type(memory) is int and 0 <= cpu < 2**53 > memory >= 0):
            raise ValueError(f"reservation of {key}: cpu_milli and memory_mib must be integers")
        namespace = message.get("namespace", "")
        if not isinstance(namespace, str) or len(namespace) > 253:
            raise ValueError(f"reservation of {key}: the namespace must be a name")
        assignment = decode_assignment(value, pod=key)
        # The namespace too: a worker's /filter checks quotas against its ledger's counts.
        self.ledger.reserve(key, assignment, cpu_milli=cpu, memory_mib=memory, namespace=namespace)
        self._deadlines.pop(key, None)
        self._deadlines[key] = (time.monotonic() if now is None else now) + self.ttl_s
        while len(self._deadlines) > MAX_MIRRORED:
            oldest = next(iter(self._deadlines))
            del self._deadlines[oldest]
            self.ledger.release(oldest)

    def sweep(self, now: float | None = None) -> int:
        """Forget what the watch replaced; release what aged out. How many were released."""
        now = time.monotonic() if now is None else now
        released = 0
        for key, deadline in list(self._deadlines.items()):
            entry = self.ledger.entry(key)
            if entry is None or not entry.reserved:
                del self._deadlines[key]
            elif deadline <= now:
                del self._deadlines[key]
                self.ledger.release(key)
                released += 1
        return released

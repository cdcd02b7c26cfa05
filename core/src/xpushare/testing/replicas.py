"""Scheduler replicas as real processes, for fault tests and the fault soak.

Why real processes: the faults that break a replicated scheduler are a whole process frozen
(SIGSTOP: a GC pause, CPU starvation, a VM stall) or killed (SIGKILL) at an arbitrary point,
while the other replica and the API server go on. An in-process fake cannot stall its own
event loop the way a frozen process does, so these start ``xpushare scheduler`` itself,
against a :class:`~xpushare.testing.apiserver.FakeApiServer` on loopback, and signal it.

* :func:`start_replica` runs one replica with short leader-election times;
* :class:`NodeAgents` plays the node agents: it completes the handoff of a pod once the pod
  is bound to the node (after a delay, or never for chosen nodes);
* :func:`overcommits` rebuilds the usage from the API server's annotations alone, as a new
  replica would, and lists every device booked past its capacity: the safety property.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp

from xpushare.codec import HANDOFF_KEY, HANDOFF_LEASE_LABEL, HANDOFF_LEASE_ROLE, decode_handoff
from xpushare.errors import CodecError
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduling import UsageLedger
from xpushare.testing.apiserver import FakeApiServer

#: Leader election fast enough for a test to see a change of leader within seconds, yet
#: slack enough that a loaded 2-core machine does not lose the lease by itself (the defaults
#: are 15 / 10 / 2 s).
FAST_LEASE = {
    "leader.lease_duration_s": "3",
    "leader.renew_deadline_s": "2",
    "leader.retry_period_s": "0.25",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Replica:
    """One ``xpushare scheduler`` process."""

    identity: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, sig)

    def freeze(self) -> None:
        self.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.signal(signal.SIGCONT)

    def alive(self) -> bool:
        return self.process.poll() is None

    async def ready(self, session: aiohttp.ClientSession) -> bool:
        """Whether this replica answers /readyz with 200 (synced and the leader)."""
        if not self.alive():
            return False
        try:
            async with session.get(
                f"{self.url}/readyz", timeout=aiohttp.ClientTimeout(total=0.5)
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    def stop(self) -> None:
        """End the process whatever its state (a frozen one is thawed to die)."""
        if self.alive():
            self.thaw()
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start_replica(
    api_url: str,
    identity: str,
    log_dir: Path,
    *,
    settings: dict[str, str] | None = None,
) -> Replica:
    """Start ``xpushare scheduler`` as a process against *api_url* (no TLS, loopback)."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "xpushare.cli",
        "scheduler",
        "--server",
        api_url,
        "--port",
        str(port),
        "--metrics-port",
        "0",
        "--leader-elect",
        "--set",
        "server.host=127.0.0.1",
        "--set",
        f"leader.identity={identity}",
        "--set",
        "leader.namespace=default",
    ]
    for key, value in {**FAST_LEASE, **(settings or {})}.items():
        args += ["--set", f"{key}={value}"]
    log_path = log_dir / f"{identity}.log"
    log = log_path.open("ab")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    return Replica(identity, port, process, log_path, log)


async def wait_leader(
    replicas: Iterable[Replica], session: aiohttp.ClientSession, timeout_s: float = 60.0
) -> Replica:
    """The replica that is ready (synced and leading), waiting for one up to *timeout_s*.

    A bound on waiting, not a figure under test: a replica's start (imports, the first
    list) took over 20 s on a 2-core machine shared with other test runs.
    """
    candidates = list(replicas)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for replica in candidates:
            if await replica.ready(session):
                return replica
        await asyncio.sleep(0.05)
    tails = "\n".join(f"--- {r.identity}\n{r.log_tail()}" for r in candidates)
    raise TimeoutError(f"no replica became the leader within {timeout_s} s\n{tails}")


@dataclass
class NodeAgents:
    """Plays every node agent: completes a node's handoff once its pod is bound there.

    ``delay_s`` is how long an agent takes to allocate (a random value up to it when
    ``jitter``); nodes in ``never`` never allocate, so their handoffs stay until they
    expire or are repaired.
    """

    api: FakeApiServer
    delay_s: float = 0.0
    jitter: bool = False
    never: set[str] = field(default_factory=set)
    served: list[tuple[str, str]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _due: dict[tuple[str, str], float] = field(default_factory=dict)

    def start(self) -> NodeAgents:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            self._pass()
            await asyncio.sleep(0.005)

    def _pass(self) -> None:
        now = time.monotonic()
        for obj in self.api.items("leases"):
            meta = obj["metadata"]
            if (meta.get("labels") or {}).get(HANDOFF_LEASE_LABEL) != HANDOFF_LEASE_ROLE:
                continue
            name = (obj.get("spec") or {}).get("holderIdentity") or ""
            raw = (meta.get("annotations") or {}).get(HANDOFF_KEY)
            if raw is None or name in self.never:
                continue
            try:
                handoff = decode_handoff(raw)
            except CodecError:
                continue
            if handoff.complete():
                continue
            target = self.api.get("pods", handoff.pod.name, handoff.pod.namespace)
            if target is None or (target.get("spec") or {}).get("nodeName") != name:
                continue
            if handoff.pod.uid and target["metadata"].get("uid") != handoff.pod.uid:
                continue
            key = (name, raw)
            delay = random.uniform(0, self.delay_s) if self.jitter else self.delay_s
            due = self._due.setdefault(key, now + delay)
            if now < due:
                continue
            del self._due[key]
            self.served.append((name, handoff.pod.name))

            def release(o: dict[str, Any], raw: str = raw) -> None:
                annotations = o["metadata"].setdefault("annotations", {})
                if annotations.get(HANDOFF_KEY) == raw:  # still the one we served
                    annotations.pop(HANDOFF_KEY, None)

            self.api.modify("leases", meta["name"], release, meta.get("namespace"))


def rebuilt_ledger(api: FakeApiServer) -> UsageLedger:
    """The usage as a new replica would count it from the API server's annotations."""
    ledger = UsageLedger()
    cluster = ClusterState(ledger)
    cluster.replace_nodes(api.items("nodes"))
    cluster.replace_pods(api.items("pods"))
    return ledger


def overcommits(api: FakeApiServer) -> list[str]:
    """Every device booked past its capacity by the pods the API server holds."""
    ledger = rebuilt_ledger(api)
    problems: list[str] = []
    for node in sorted(ledger.nodes):
        problems.extend(ledger.overbooked(node))
    return problems

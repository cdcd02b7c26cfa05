"""Kubernetes Events on pods (and nodes): where a pod went and why, or why it could not go.

Why a queue with a worker: an Event is an API write, and neither /filter nor /bind may wait
on one (the extender sits in kube-scheduler's serial cycle). Handlers only append here; one
task sends the events, drops repeats of the same message for the same object within a
window, and never lets a failure reach a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
import uuid
from dataclasses import dataclass

from xpushare.scheduler.kube import Kube, KubeError

log = logging.getLogger(__name__)

#: Kubernetes truncates an Event message at 1 KiB in kubectl's view; we cut there too.
MAX_MESSAGE = 1024
#: The same (object, reason, message) is sent at most once per this many seconds; client-go's
#: event correlator aggregates similar events over 10 minutes, we keep it shorter so a pod
#: that keeps failing still says so.
REPEAT_WINDOW_S = 60.0
#: Events waiting beyond this are dropped (oldest first) rather than growing without bound.
QUEUE_LIMIT = 1000


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    namespace: str
    name: str
    uid: str = ""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Sends events in the background; :meth:`record` never blocks or raises."""

    def __init__(self, kube: Kube | None, component: str, instance: str = "") -> None:
        self.kube = kube
        self.component = component
        self.instance = instance
        self._queue: asyncio.Queue[tuple[ObjectRef, str, str, str]] = asyncio.Queue()
        self._recent: dict[tuple[ObjectRef, str, str], float] = {}
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        self.dropped = 0

    def record(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        message = message[:MAX_MESSAGE]
        key = (ref, reason, message)
        now = time.monotonic()
        last = self._recent.get(key)
        if last is not None and now - last < REPEAT_WINDOW_S:
            return
        self._recent[key] = now
        if len(self._recent) > 4 * QUEUE_LIMIT:
            cutoff = now - REPEAT_WINDOW_S
            self._recent = {k: t for k, t in self._recent.items() if t >= cutoff}
        if self._queue.qsize() >= QUEUE_LIMIT:
            self._queue.get_nowait()
            self.dropped += 1
        self._queue.put_nowait((ref, type_, reason, message))

    def start(self) -> None:
        if self._task is None and self.kube is not None:
            self._task = asyncio.create_task(self._run(), name="xpushare-events")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until the queue is empty (tests)."""
        deadline = time.monotonic() + timeout_s
        while not self._queue.empty() or self._busy:
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.005)

    _busy = False

    async def _run(self) -> None:
        assert self.kube is not None
        while True:
            ref, type_, reason, message = await self._queue.get()
            self._busy = True
            now = _now()
            namespace = ref.namespace or "default"
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{ref.name}.{uuid.uuid4().hex[:16]}",
                    "namespace": namespace,
                },
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": ref.kind,
                    "name": ref.name,
                    "namespace": ref.namespace,
                    "uid": ref.uid,
                },
                "reason": reason,
                "message": message,
                "type": type_,
                "source": {"component": self.component},
                "reportingComponent": self.component,
                "reportingInstance": self.instance,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
            try:
                await self.kube.create_event(namespace, body)
                self.sent += 1
            except KubeError as exc:
                log.info(
                    "event %s on %s %s/%s not sent: %s", reason, ref.kind, namespace, ref.name, exc
                )
            finally:
                self._busy = False

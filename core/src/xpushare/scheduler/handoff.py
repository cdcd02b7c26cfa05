"""The per-node handoff at bind (DESIGN.md §6): wait for the node, write it, repair stale ones.

Why: kubelet's Allocate carries no pod identity, so the node agent learns which pod it serves
from the node's ``xpushare.io/handoff`` annotation, and a node can serve one handed-off pod
at a time. Unlike HAMi's node lock, ``/filter`` never looks at it: only ``/bind`` waits,
bounded, for the node's previous handoff, and binds for one node queue in arrival order.

A handoff is *free* when it is absent, expired, complete (every vendor allocated), or names
the pod being bound. A stale one is repaired (cleared) when its pod is gone, already started
(its Allocate happened), bound elsewhere, or was never bound while no bind of it is in
flight here. Every write is a JSON merge patch carrying the node's resourceVersion, so a
concurrent write by the node agent makes ours fail with 409 and we re-read instead of
overwriting it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from xpushare.codec import HANDOFF_KEY, Handoff, encode_handoff
from xpushare.models import PodRef
from xpushare.scheduler import objects as ob
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduler.kube import Conflict, Kube, KubeError, NotFound
from xpushare.scheduler.metrics import SchedulerMetrics

log = logging.getLogger(__name__)


class HandoffTimeout(Exception):
    """The node's previous handoff did not clear in time."""


class HandoffAborted(Exception):
    """The pod being bound went away while waiting."""


@dataclass
class _Slot:
    lock: asyncio.Lock
    changed: asyncio.Event


def same_pod(a: PodRef, b: PodRef) -> bool:
    if a.uid and b.uid:
        return a.uid == b.uid
    return (a.namespace, a.name) == (b.namespace, b.name)


class HandoffManager:
    """Owns the writes of every node's handoff annotation."""

    def __init__(
        self,
        kube: Kube,
        cluster: ClusterState,
        metrics: SchedulerMetrics,
        *,
        ttl_s: float,
        conflict_retries: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.cluster = cluster
        self.metrics = metrics
        self.ttl_s = ttl_s
        self.conflict_retries = conflict_retries
        self.clock = clock
        self._slots: dict[str, _Slot] = {}
        #: Pod keys with a bind in flight here: their handoff is not stale.
        self.in_flight: set[str] = set()
        cluster.on_node_changed.append(self._changed)

    def _slot(self, node: str) -> _Slot:
        slot = self._slots.get(node)
        if slot is None:
            slot = self._slots[node] = _Slot(asyncio.Lock(), asyncio.Event())
        return slot

    def _changed(self, node: str) -> None:
        slot = self._slots.get(node)
        if slot is not None:
            slot.changed.set()

    # -- the state of one node's handoff -----------------------------------------------------------

    def _free_for(self, node: str, pod: PodRef) -> bool:
        record = self.cluster.nodes.get(node)
        if record is None or record.handoff_raw is None:
            return True
        handoff = record.handoff
        if handoff is None:
            return False  # malformed: repaired by the caller, never ignored
        return handoff.expired(self.clock()) or handoff.complete() or same_pod(handoff.pod, pod)

    async def stale_cause(self, node: str) -> str | None:
        """Why the node's current handoff may be cleared, or None if it is live."""
        record = self.cluster.nodes.get(node)
        if record is None or record.handoff_raw is None:
            return None
        handoff = record.handoff
        if handoff is None:
            return "malformed"
        if handoff.expired(self.clock()):
            return "expired"
        if handoff.complete():
            return "complete"
        key = handoff.pod.uid or f"{handoff.pod.namespace}/{handoff.pod.name}"
        if key in self.in_flight:
            return None
        known = self.cluster.pod_by_name(handoff.pod.namespace, handoff.pod.name)
        if known is not None and (not handoff.pod.uid or known.ref.uid == handoff.pod.uid):
            if known.node != node:
                return "bound-elsewhere"
            return "started" if known.started else None
        try:
            pod = await self.kube.get_pod(handoff.pod.namespace, handoff.pod.name)
        except NotFound:
            return "pod-gone"
        except KubeError:
            return None
        if handoff.pod.uid and ob.uid(pod) != handoff.pod.uid:
            return "pod-gone"
        bound = ob.node_name(pod)
        if bound and bound != node:
            return "bound-elsewhere"
        if ob.started(pod):
            return "started"
        if not bound and self.clock() - handoff.since > 2.0:
            # Written by a bind that failed or died (a restart) and nobody binds it now.
            return "never-bound"
        return None

    # -- writes ------------------------------------------------------------------------------------

    async def _refresh(self, node: str) -> None:
        try:
            obj = await self.kube.get_node(node)
        except NotFound:
            self.cluster.delete_node({"metadata": {"name": node}})
            return
        self.cluster.apply_node(obj)

    async def _write(self, node: str, value: str | None) -> None:
        record = self.cluster.nodes.get(node)
        version = record.resource_version if record else None
        obj = await self.kube.patch_node_annotations(
            node, {HANDOFF_KEY: value}, resource_version=version
        )
        # Apply our own write now rather than when the watch echoes it: the next bind for
        # this node must see it at once.
        self.cluster.apply_node(obj)

    async def clear(self, node: str, expected: Handoff | None, cause: str) -> bool:
        """Remove the node's handoff if it is still *expected*; False if it changed."""
        record = self.cluster.nodes.get(node)
        if record is None or record.handoff != expected or record.handoff_raw is None:
            return False
        try:
            await self._write(node, None)
        except Conflict:
            await self._refresh(node)
            return False
        except KubeError as exc:
            log.warning("clearing the handoff of node %s failed: %s", node, exc)
            return False
        self.metrics.handoff_repairs.labels(cause=cause).inc()
        log.info(
            "cleared the %s handoff of node %s (pod %s)",
            cause,
            node,
            expected.pod if expected else "?",
        )
        return True

    async def acquire(
        self,
        node: str,
        pod: PodRef,
        vendors: tuple[str, ...],
        *,
        deadline: float,
        aborted: Callable[[], bool],
    ) -> Handoff:
        """Wait (until the monotonic *deadline*) for the node and write *pod*'s handoff."""
        slot = self._slot(node)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await asyncio.wait_for(slot.lock.acquire(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            raise HandoffTimeout(self._busy_message(node, started)) from None
        try:
            conflicts = 0
            while True:
                if aborted():
                    raise HandoffAborted(f"pod {pod} was deleted while waiting for node {node}")
                if not self._free_for(node, pod):
                    record = self.cluster.nodes.get(node)
                    current = record.handoff if record else None
                    cause = await self.stale_cause(node)
                    if cause is not None:
                        await self.clear(node, current, cause)
                        continue
                    await self._wait_change(slot, node, deadline, started)
                    continue
                handoff = Handoff.begin(pod, vendors, now=self.clock(), ttl_s=self.ttl_s)
                try:
                    await self._write(node, encode_handoff(handoff, node=node))
                except Conflict:
                    conflicts += 1
                    if conflicts > self.conflict_retries:
                        raise
                    await self._refresh(node)
                    continue
                self.metrics.handoff_wait_seconds.observe(loop.time() - started)
                return handoff
        finally:
            slot.lock.release()

    async def _wait_change(self, slot: _Slot, node: str, deadline: float, started: float) -> None:
        loop = asyncio.get_running_loop()
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise HandoffTimeout(self._busy_message(node, started))
        handoff = self.cluster.handoff(node)
        wait = remaining
        if handoff is not None:
            # Wake up when it expires even if no event comes.
            wait = min(wait, max(0.01, handoff.expires - self.clock()))
        slot.changed.clear()
        # Re-check periodically too: a pod that started shows up on the pod watch, not
        # on the node's.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(slot.changed.wait(), min(wait, 0.5))

    def _busy_message(self, node: str, started: float) -> str:
        handoff = self.cluster.handoff(node)
        waited = asyncio.get_running_loop().time() - started
        who = f" pod {handoff.pod}" if handoff else " another pod"
        return (
            f"node {node} is still handing its devices to{who} after {waited:.1f} s (its "
            "device plugin has not called Allocate yet); kube-scheduler retries this pod"
        )

    async def release(self, node: str, pod: PodRef) -> None:
        """Take back *pod*'s handoff after a failed bind (if it is still the node's)."""
        handoff = self.cluster.handoff(node)
        if handoff is not None and same_pod(handoff.pod, pod):
            await self.clear(node, handoff, "bind-failed")

    async def repair_all(self) -> int:
        """Clear every stale handoff (the leader calls this periodically)."""
        cleared = 0
        for node, record in list(self.cluster.nodes.items()):
            if record.handoff_raw is None:
                continue
            slot = self._slot(node)
            if slot.lock.locked():
                continue  # a bind is deciding about this node right now
            cause = await self.stale_cause(node)
            if cause is not None and await self.clear(node, record.handoff, cause):
                cleared += 1
        return cleared

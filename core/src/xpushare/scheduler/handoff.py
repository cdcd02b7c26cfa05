"""The per-node handoff at bind (DESIGN.md §6): wait for the node, write it, repair stale ones.

Why: kubelet's Allocate carries no pod identity, so the node agent learns which pod it serves
from the ``xpushare.io/handoff`` annotation of the node's handoff Lease (handoffbook.py: a
Lease per node, so that the Node itself is not written at each bind), and a node can serve
one handed-off pod at a time. Unlike HAMi's node lock, ``/filter`` never looks at it: only
``/bind`` waits, bounded, for the node's previous handoff, and binds for one node queue in
arrival order.

The handoff is also what keeps two scheduler replicas from double-booking a node
(docs/scheduler.md, "Why no interleaving can double-book"):

* every write of a node's handoff is a JSON merge patch carrying its Lease's
  resourceVersion, or the Lease's creation (a concurrent writer makes ours fail with 409
  and we re-read), and the writer's term (``xpushare.io/scheduler-term``); a replica never
  writes a handoff that carries a newer term than its own (:class:`Fenced`), so a deposed
  leader cannot commit;
* a bind writes its pod's handoff before it writes the Binding, so the only pod whose
  Binding may still land on a node is the one its current handoff names;
* a handoff is replaced only when its pod is bound, gone, or *fenced*: a patch of the pod
  that changes its resourceVersion, which the writer's Binding carries as a precondition.

A handoff is *free* when it is absent, complete (every vendor allocated: written by node
agents before 2026-12-06), names the pod being bound under this term, or names a pod kubelet
has admitted on the node (``status.startTime``, :func:`objects.started`): the node agent
writes nothing when it has served a pod, and kubelet's own status write is the sign that
every Allocate of the pod is behind it. A free handoff is replaced by the next bind's in one
write, never cleared first. Any other is judged by :meth:`HandoffManager.stale_cause`.
Times read from a handoff are bounded by the configured lifetime on this replica's clock
(:meth:`~xpushare.codec.Handoff.expires_for`), so a skewed or hand-edited one cannot block
a node for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from xpushare.codec import FENCED_KEY, HANDOFF_KEY, TERM_KEY, Handoff, encode_handoff
from xpushare.models import PodRef
from xpushare.scheduler import objects as ob
from xpushare.scheduler import versions
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduler.handoffbook import HandoffRecord
from xpushare.scheduler.kube import Conflict, Kube, KubeError, NotFound
from xpushare.scheduler.metrics import SchedulerMetrics

log = logging.getLogger(__name__)


#: How long the takeover read waits for the pod watch to pass the handoff write before it
#: reads the node's pods from the API server instead: in a busy cluster pod events arrive
#: every few milliseconds (40 pods/s are some 150 pod events a second), so the watch passes
#: a write within one or two of them; in a quiet one no event may come for a minute (a
#: bookmark), and then the one read costs less than waiting. 0.1 s on top of a node's
#: first bind of a term is the most the wait adds.
TAKEOVER_WATCH_WAIT_S = 0.1
#: How often the wait looks at the pod watch's version.
TAKEOVER_POLL_S = 0.005

#: How long a handoff of a pod that is not bound may stay before it is taken for the leftover
#: of a bind that failed or died: a live bind writes the Binding right after the handoff
#: (one API round trip), so two seconds on this replica's clock is far past it.
NEVER_BOUND_GRACE_S = 2.0


class HandoffTimeout(Exception):
    """The node's previous handoff did not clear in time."""


class HandoffAborted(Exception):
    """The pod being bound went away while waiting."""


class Fenced(Exception):
    """The node carries a newer term than this bind's, or this very term written by another
    replica (two Leases counted to the same number: it was deleted and re-created): this
    replica must not write the node under this term."""

    def __init__(self, node: str, term: int, node_term: int) -> None:
        if node_term > term:
            why = "this replica is not the leader any more"
        else:
            why = (
                "another replica wrote the same term number (the Lease was re-created), "
                "so this replica's term is raised past it before it writes again"
            )
        super().__init__(
            f"node {node} was written by a scheduler replica of term {node_term} and this "
            f"bind runs under term {term}: {why}; kube-scheduler retries the pod"
        )
        self.node = node
        self.term = term
        self.node_term = node_term


@dataclass
class _Slot:
    lock: asyncio.Lock
    changed: asyncio.Event


@dataclass(frozen=True)
class Acquired:
    """A handoff this bind wrote, and what the caller must do before its Binding."""

    handoff: Handoff
    #: No read of the node's pods has followed a write of this term on the node yet:
    #: Bindings of older terms may have landed that this replica's watch has not shown, so
    #: the caller reads them (:meth:`HandoffManager.read_node_pods`) before binding.
    took_over: bool
    #: The pod's resourceVersion after this bind fenced it (an older term had left a
    #: handoff of the very same pod): the Binding's precondition. Empty when not fenced.
    pod_version: str = ""


def same_pod(a: PodRef, b: PodRef) -> bool:
    if a.uid and b.uid:
        return a.uid == b.uid
    return (a.namespace, a.name) == (b.namespace, b.name)


def pod_key(pod: PodRef) -> str:
    """The ledger key of a pod named by a handoff (the same as :func:`objects.pod_key`)."""
    return pod.uid or f"{pod.namespace}/{pod.name}"


class HandoffManager:
    """Owns the writes of every node's handoff (its Lease's annotations)."""

    def __init__(
        self,
        kube: Kube,
        cluster: ClusterState,
        metrics: SchedulerMetrics,
        *,
        ttl_s: float,
        conflict_retries: int = 5,
        clock: Callable[[], float] = time.time,
        term: Callable[[], int | None] = lambda: None,
        raise_term: Callable[[int], Awaitable[int | None]] | None = None,
        pods_version: Callable[[], int] | None = None,
    ) -> None:
        self.kube = kube
        self.cluster = cluster
        self.book = cluster.handoff_book
        self.metrics = metrics
        self.ttl_s = ttl_s
        self.conflict_retries = conflict_retries
        self.clock = clock
        #: The fencing token of this replica now (None: no leader election, no fencing).
        self.term = term
        self._raise_term = raise_term
        #: The resourceVersion (an etcd revision) up to which the pod watch has been
        #: applied to the cluster state (None: unknown, the takeover always lists).
        self._pods_version = pods_version
        self._slots: dict[str, _Slot] = {}
        #: Pod keys with a bind in flight here: their handoff is not stale.
        self.in_flight: set[str] = set()
        #: The term this replica last wrote each node under: a node carrying our term
        #: number that we did not write was written by another replica holding the same
        #: number (a re-created Lease), and is a newer term's node as far as we are
        #: concerned.
        self._written: dict[str, int] = {}
        #: The term under which each node's pods were last read after a write of ours (the
        #: takeover read): binds of a term read once per node, whatever wrote first.
        self._read_under: dict[str, int] = {}
        #: The version of each node's handoff Lease whose pod kubelet was seen admitting
        #: there: that handoff stays free when its pod is deleted afterwards (no fence read
        #: for a pod that is gone anyway).
        self._served: dict[str, str] = {}
        cluster.on_node_changed.append(self._changed)
        cluster.on_pod_started.append(self._pod_started)
        self.book.on_changed.append(self._changed)

    def _slot(self, node: str) -> _Slot:
        slot = self._slots.get(node)
        if slot is None:
            slot = self._slots[node] = _Slot(asyncio.Lock(), asyncio.Event())
        return slot

    def _changed(self, node: str) -> None:
        slot = self._slots.get(node)
        if slot is not None:
            slot.changed.set()
        if node not in self.book.records:
            # The Lease is gone (with its Node, or by hand), and with it what says which
            # terms wrote it: the next write creates it afresh and its pods are read again.
            self._written.pop(node, None)
            self._read_under.pop(node, None)
            self._served.pop(node, None)
        if node not in self.cluster.nodes and slot is not None and not slot.lock.locked():
            del self._slots[node]  # a deleted node's slot must not outlive it

    # -- the state of one node's handoff -----------------------------------------------------------

    def expired(self, record: HandoffRecord) -> bool:
        """Whether the node's handoff has expired, on this replica's clock."""
        handoff = record.handoff
        if handoff is None:
            return False
        return self.clock() >= handoff.expires_for(record.seen, self.ttl_s)

    def _pod_started(self, node: str) -> None:
        record = self.book.get(node)
        handoff = record.handoff if record is not None else None
        if (
            record is not None
            and handoff is not None
            and self.cluster.admitted_on(node, handoff.pod)
        ):
            self._served[node] = record.resource_version
        self._changed(node)

    def _free_for(self, node: str, pod: PodRef, term: int | None) -> bool:
        record = self.book.get(node)
        if record is None or record.raw is None:
            return True
        handoff = record.handoff
        if handoff is None:
            return False  # malformed: repaired by the caller, never ignored
        if handoff.complete() or self._admitted(node, handoff):
            return True
        # The same pod's handoff from an older term is not ours to overwrite: the bind that
        # wrote it may still land, so it is fenced first (stale_cause).
        return same_pod(handoff.pod, pod) and (term or 0) <= handoff.term

    def _admitted(self, node: str, handoff: Handoff) -> bool:
        """Whether kubelet has admitted the handoff's pod on *node* (objects.started), or
        was seen doing so for this very version of the Lease: its Allocates are all behind
        it, so its handoff has served and is free.

        The node agent writes nothing when it has served a pod (DESIGN.md §6): this, from
        kubelet's own status write, is what frees the node for the next bind.
        """
        if self.cluster.admitted_on(node, handoff.pod):
            return True
        record = self.book.get(node)
        return (
            record is not None
            and record.handoff is handoff
            and self._served.get(node) == record.resource_version
        )

    def _check_term(self, node: str, term: int | None) -> None:
        record = self.book.get(node)
        node_term = record.term if record is not None else None
        if term is None or node_term is None:
            return
        if node_term > term or (node_term == term and self._written.get(node) != term):
            raise Fenced(node, term, node_term)

    async def stale_cause(self, node: str, term: int | None = None) -> str | None:
        """Why the node's current handoff may be cleared, or None if it is live.

        A handoff whose pod is not known to be bound is only declared stale after its pod
        was fenced (:meth:`_fence`): from then on the bind that wrote it cannot land.
        """
        cause, _ = await self._judge(node, term)
        return cause

    async def _judge(
        self, node: str, term: int | None, binding: PodRef | None = None
    ) -> tuple[str | None, ob.Object | None]:
        """:meth:`stale_cause`, and the handoff's pod as a fence read it (None: not fenced).

        *binding* is the pod the caller is binding: a handoff of that pod is an older
        term's, not a bind in flight here (one bind per pod at a time).
        """
        record = self.book.get(node)
        if record is None or record.raw is None:
            return None, None
        handoff = record.handoff
        if handoff is None:
            return "malformed", None
        if handoff.complete():
            return "complete", None
        mine = binding is not None and same_pod(handoff.pod, binding)
        if not mine and pod_key(handoff.pod) in self.in_flight:
            return None, None  # our own bind settles it, whatever its times say
        expired = self.expired(record)
        known = self.cluster.pod_by_name(handoff.pod.namespace, handoff.pod.name)
        if known is not None and (not handoff.pod.uid or known.ref.uid == handoff.pod.uid):
            if known.node != node:
                return "bound-elsewhere", None
            if known.started:
                return "started", None
            return ("expired" if expired else None), None
        young = self.clock() - record.seen <= NEVER_BOUND_GRACE_S
        if not expired and young and not mine:
            return None, None
        return await self._fence(node, handoff, term, expired)

    async def _fence(
        self, node: str, handoff: Handoff, term: int | None, expired: bool
    ) -> tuple[str | None, ob.Object | None]:
        """Patch the handoff's pod so that a Binding written before cannot land, and judge
        the handoff by the pod as the API server has it now."""
        pod = handoff.pod
        try:
            obj = await self.kube.patch_pod_annotations(
                pod.namespace, pod.name, {FENCED_KEY: str(term or 0)}
            )
        except NotFound:
            return "pod-gone", None
        except KubeError as exc:
            log.warning("cannot fence pod %s of the handoff of node %s: %s", pod, node, exc)
            return None, None
        if pod.uid and ob.uid(obj) != pod.uid:
            return "pod-gone", None
        # Count it now if it is bound: our watch may not have shown its Binding yet.
        self.cluster.apply_pod(obj)
        self.metrics.handoff_repairs.labels(cause="fenced").inc()
        bound = ob.node_name(obj)
        if not bound:
            return ("expired" if expired else "never-bound"), obj
        if bound != node:
            return "bound-elsewhere", obj
        if ob.started(obj):
            return "started", obj
        return ("expired" if expired else None), obj

    # -- writes ------------------------------------------------------------------------------------

    async def _refresh(self, node: str) -> None:
        record = self.book.get(node)
        held = record.resource_version if record is not None else ""
        try:
            obj = await self.kube.get_handoff_lease(node)
        except NotFound:
            self.book.forget(node, held)
            return
        self.book.apply(obj)

    async def _write(self, node: str, value: str | None, term: int | None) -> None:
        """Write the node's handoff (None removes it) under *term*.

        The handoff's term is checked on the version the write is conditioned on, so the API
        server refuses the write (409) if a newer term wrote it in between. A node without a
        Lease gets one: its creation is refused (409) if another writer created it first.
        """
        self._check_term(node, term)
        record = self.book.get(node)
        patch: dict[str, str | None] = {HANDOFF_KEY: value}
        if term is not None:
            patch[TERM_KEY] = str(term)
        if record is None or not record.resource_version:
            if value is None:
                return  # no Lease, no handoff: nothing to remove
            known = self.cluster.nodes.get(node)
            obj = await self.kube.create_handoff_lease(
                node, patch, owner_uid=known.uid if known is not None else ""
            )
        else:
            sent = record.resource_version
            try:
                obj = await self.kube.patch_handoff_lease(node, patch, resource_version=sent)
            except NotFound:
                # Deleted since we read it (with its Node, or by hand): what it held is gone
                # and the caller re-reads, as after any conflict.
                self.book.forget(node, sent)
                raise Conflict(409, f"the handoff Lease of node {node} was deleted") from None
        if term is not None:
            self._written[node] = term
        # Apply our own write now rather than when the watch echoes it: the next bind for
        # this node must see it at once.
        self.book.apply(obj)

    def needs_read(self, node: str, term: int | None) -> bool:
        """Whether a bind under *term* must read the node's pods before its Binding."""
        return term is not None and self._read_under.get(node) != term

    async def read_node_pods(self, node: str, term: int | None) -> None:
        """Count every pod the API server has bound to *node* up to this term's write of its
        handoff: from the pod watch once it has passed that write, else a consistent read.

        Called after a write of this term on the node and before the first Binding of the
        term there: from that write on no other term can write the node's handoff, so no
        Binding but the one its current handoff names (which is fenced before it is
        replaced) can land later, and what this read shows is complete. Its pods go through
        the cluster state's version order, so no older event can undo them afterwards.

        Why the watch may stand in for the read: resourceVersions are etcd revisions, one
        counter for the whole store, and a watch delivers a resource's events in revision
        order. Once the pod watch has applied an event (or a bookmark, or a relist) at or
        past the revision of the handoff write, every pod change committed before that
        write, every Binding of an older term among them, is in the cluster state: what
        the read would have shown. A read costs kube-apiserver a list request per node
        and term (0.4-0.5 a pod in bench_realcluster's later rounds, which spread pods over
        new nodes), the wait nothing in a busy cluster.
        """
        record = self.book.get(node)
        written = versions.number(record.resource_version) if record is not None else 0
        if written and await self._watch_passes(written):
            self.metrics.takeover_reads.labels(source="watch").inc()
        else:
            await self._list_node_pods(node)
            self.metrics.takeover_reads.labels(source="list").inc()
        if term is not None and self._written.get(node) == term:
            self._read_under[node] = term

    async def _watch_passes(self, version: int) -> bool:
        """Whether the pod watch reaches *version* within :data:`TAKEOVER_WATCH_WAIT_S`."""
        seen = self._pods_version
        if seen is None:
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TAKEOVER_WATCH_WAIT_S
        while seen() < version:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(TAKEOVER_POLL_S)
        return True

    async def _list_node_pods(self, node: str) -> None:
        try:
            pods = await self.kube.list_node_pods(node)
        except KubeError as exc:
            raise KubeError(
                exc.status, f"reading the pods of node {node} after a change of leader: {exc}"
            ) from exc
        for obj in pods:
            self.cluster.apply_pod(obj)

    async def clear(
        self, node: str, expected: Handoff | None, cause: str, term: int | None = None
    ) -> bool:
        """Remove the node's handoff if it is still *expected*; False if it changed."""
        record = self.book.get(node)
        if record is None or record.handoff != expected or record.raw is None:
            return False
        try:
            await self._write(node, None, self.term() if term is None else term)
        except Conflict:
            await self._refresh(node)
            return False
        except Fenced as exc:
            log.info("not clearing the handoff of node %s: %s", node, exc)
            return False
        except KubeError as exc:
            log.warning("clearing the handoff of node %s failed: %s", node, exc)
            return False
        self._repaired(node, cause, expected)
        return True

    def _repaired(
        self, node: str, cause: str, replaced: Handoff | None, done: str = "cleared"
    ) -> None:
        self.metrics.handoff_repairs.labels(cause=cause).inc()
        log.info(
            "%s the %s handoff of node %s (pod %s)",
            done,
            cause,
            node,
            replaced.pod if replaced else "?",
        )

    async def acquire(
        self,
        node: str,
        pod: PodRef,
        vendors: tuple[str, ...],
        *,
        deadline: float,
        aborted: Callable[[], bool],
        term: int | None = None,
    ) -> Acquired:
        """Wait (until the monotonic *deadline*) for the node and write *pod*'s handoff
        under *term* (the term the bind decided under)."""
        slot = self._slot(node)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout_at(deadline):
                await slot.lock.acquire()
        except TimeoutError:
            raise HandoffTimeout(self._busy_message(node, started)) from None
        try:
            conflicts = 0
            pod_version = ""
            while True:
                if aborted():
                    raise HandoffAborted(f"pod {pod} was deleted while waiting for node {node}")
                try:
                    self._check_term(node, term)
                except Fenced as exc:
                    await self._heal(exc)
                    raise
                repaired: tuple[str, Handoff | None] | None = None
                if not self._free_for(node, pod, term):
                    record = self.book.get(node)
                    current = record.handoff if record else None
                    judged = record.resource_version if record else ""
                    cause, fenced = await self._judge(node, term, pod)
                    if cause is None:
                        await self._wait_change(slot, node, deadline, started)
                        continue
                    if fenced is not None and current is not None and same_pod(current.pod, pod):
                        pod_version = ob.resource_version(fenced)
                    now = self.book.get(node)
                    if now is None or now.resource_version != judged or aborted():
                        continue  # it changed while judged (or the pod went): look again
                    # The stale handoff is replaced by this one in the same write (its
                    # precondition is the version judged), not cleared first: one write.
                    repaired = (cause, current)
                handoff = Handoff.begin(
                    pod, vendors, now=self.clock(), ttl_s=self.ttl_s, term=term or 0
                )
                try:
                    await self._write(node, encode_handoff(handoff, node=node), term)
                except Conflict:
                    conflicts += 1
                    if conflicts > self.conflict_retries:
                        raise
                    await self._refresh(node)
                    continue
                if repaired is not None:
                    self._repaired(node, *repaired, done="replaced")
                self.metrics.handoff_wait_seconds.observe(loop.time() - started)
                # Whatever this term wrote first on the node (this handoff, a repair), its
                # pods are read once before its first Binding there.
                return Acquired(handoff, self.needs_read(node, term), pod_version)
        finally:
            slot.lock.release()

    async def _heal(self, exc: Fenced) -> None:
        """A node newer than our term, or of our term number by another writer, while we
        hold the Lease: the Lease's count restarted (re-created); raise our term past the
        node's for the binds that come next (only the Lease's holder can)."""
        if self._raise_term is not None and exc.term == self.term():
            await self._raise_term(exc.node_term)

    async def _wait_change(self, slot: _Slot, node: str, deadline: float, started: float) -> None:
        loop = asyncio.get_running_loop()
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise HandoffTimeout(self._busy_message(node, started))
        record = self.book.get(node)
        wait = remaining
        if record is not None and record.handoff is not None:
            # Wake up when it expires even if no event comes.
            expires = record.handoff.expires_for(record.seen, self.ttl_s)
            wait = min(wait, max(0.01, expires - self.clock()))
        slot.changed.clear()
        # Re-check periodically too: an expired handoff or a never-bound pod is judged on
        # time, and no event comes for those.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(wait, 0.5)):
                await slot.changed.wait()

    def _busy_message(self, node: str, started: float) -> str:
        handoff = self.cluster.handoff(node)
        waited = asyncio.get_running_loop().time() - started
        who = f" pod {handoff.pod}" if handoff else " another pod"
        return (
            f"node {node} is still handing its devices to{who} after {waited:.1f} s (kubelet "
            "has not admitted it yet: no status.startTime); kube-scheduler retries this pod"
        )

    async def release(self, node: str, pod: PodRef, term: int | None = None) -> None:
        """Take back *pod*'s handoff after a failed bind (if it is still the node's)."""
        handoff = self.cluster.handoff(node)
        if handoff is not None and same_pod(handoff.pod, pod):
            await self.clear(node, handoff, "bind-failed", term)

    async def repair_all(self) -> int:
        """Clear every stale handoff (the leader calls this periodically)."""
        cleared = 0
        term = self.term()
        for node, record in list(self.book.records.items()):
            if record.raw is None:
                continue
            if term is not None and record.term is not None and record.term > term:
                continue  # a newer leader's node: not ours to touch
            slot = self._slot(node)
            if slot.lock.locked():
                continue  # a bind is deciding about this node right now
            if record.handoff is not None and self._admitted(node, record.handoff):
                continue  # served and free: the next bind replaces it, no write before
            cause = await self.stale_cause(node, term)
            if cause is not None and await self.clear(node, record.handoff, cause, term):
                cleared += 1
        return cleared

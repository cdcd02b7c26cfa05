"""The nodes' handoff Leases as the scheduler knows them, in resourceVersion order.

Why a Lease per node and not an annotation of the Node: kubelet's Allocate carries no pod
identity, so the scheduler writes at bind which pod a node serves next and the node agent
releases it once served (DESIGN.md §6): two writes per pod. On the Node those two writes
were sent to every Node watcher of the cluster (each kube-scheduler, kube-controller-manager,
CNI agent: 13.7 node watch events and 43.8 KiB a pod at 1,000 nodes, docs/benchmarks.md
"Session 16"). A Lease named after the node (``handoff.<node>``, label
``xpushare.io/role=handoff``) in the release's namespace is watched by this scheduler only,
and read by the node agent at Allocate.

The Lease carries what the Node carried: ``xpushare.io/handoff`` and the writer's term
``xpushare.io/scheduler-term``; its resourceVersion is what every write is conditioned on
(docs/scheduler.md, "Why no interleaving can double-book"). ``spec.holderIdentity`` names the
node; a Lease whose name is not the one that node's handoff must have is reported and
ignored, so no object can speak for another node's handoff.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from xpushare.codec import HANDOFF_KEY, TERM_KEY, Handoff, decode_handoff, parse_term
from xpushare.codec import handoff_lease_name as lease_name
from xpushare.errors import CodecError
from xpushare.scheduler import objects as ob
from xpushare.scheduler import versions
from xpushare.scheduler.versions import MAX_TOMBSTONES, ListSnapshot, Tombstones

#: Called with (kind, object, annotation key, message) for a bad value (cluster.Reporter).
Reporter = Callable[[str, ob.Object, str, str], None]

#: Longest node name read from a Lease's holderIdentity: a node name is a DNS subdomain.
MAX_NODE_NAME = 253


@dataclass(slots=True)
class HandoffRecord:
    """One node's handoff as its Lease last showed it."""

    node: str
    #: The Lease's resourceVersion: every write of the handoff is conditioned on it.
    resource_version: str = ""
    uid: str = ""
    raw: str | None = None
    handoff: Handoff | None = None
    error: str | None = None
    #: When this replica first saw the current handoff value (its own clock, Unix seconds):
    #: the handoff's own times are the writer's clock, so they are bounded by this one.
    seen: float = 0.0
    #: The fencing token of the last scheduler replica that wrote the handoff (TERM_KEY).
    term: int | None = None


def node_of(obj: ob.Object) -> str | None:
    """The node a handoff Lease speaks for, or None when its name is not that node's."""
    spec = obj.get("spec")
    holder = spec.get("holderIdentity") if isinstance(spec, dict) else None
    if not isinstance(holder, str) or not holder or len(holder) > MAX_NODE_NAME:
        return None
    return holder if ob.name(obj) == lease_name(holder) else None


class HandoffBook:
    """Every node's handoff Lease, from the watch and from the answers of our own writes."""

    def __init__(
        self,
        *,
        report: Reporter | None = None,
        clock: Callable[[], float] = time.time,
        decode: bool = True,
    ) -> None:
        self.records: dict[str, HandoffRecord] = {}
        self._report = report or (lambda kind, obj, key, message: None)
        self._clock = clock
        #: Whether handoffs are decoded: only a process that binds waits for them.
        self.decode = decode
        self._tombstones = Tombstones(MAX_TOMBSTONES)
        #: The newest version applied of each node's Lease (versions.advance).
        self._versions: dict[str, int] = {}
        #: The highest fencing term any handoff carries (TERM_KEY): a replica taking the
        #: leader Lease starts above it even if that Lease was deleted and re-created.
        self.highest_term = 0
        #: Called with a node name when its handoff's value or version changed.
        self.on_changed: list[Callable[[str], None]] = []
        self.synced = False

    def get(self, node: str) -> HandoffRecord | None:
        return self.records.get(node)

    def handoff(self, node: str) -> Handoff | None:
        record = self.records.get(node)
        return record.handoff if record else None

    def apply(self, obj: ob.Object) -> None:
        """A handoff Lease was added or changed (a watch event, a read, our write's answer)."""
        node = node_of(obj)
        if node is None:
            self._report(
                "lease",
                obj,
                "spec.holderIdentity",
                f"Lease {ob.name(obj)!r} carries the handoff label but its name is not "
                "handoff.<node> of the node its spec.holderIdentity names; ignored (only the "
                "scheduler creates handoff Leases: delete this one)",
            )
            return
        if not versions.advance(self._versions, self._tombstones, node, versions.of(obj)):
            # Our own write already applied this state or a newer one (the watch's echo of
            # it changes nothing), or the Lease was deleted since: a late event must not
            # bring an old handoff back.
            return
        record = self.records.get(node)
        if record is None:
            record = self.records[node] = HandoffRecord(node)
        record.resource_version = ob.resource_version(obj)
        record.uid = ob.uid(obj)
        annotations = ob.annotations_of(obj)
        term_raw = annotations.get(TERM_KEY)
        record.term = parse_term(term_raw)
        if record.term is not None and record.term > self.highest_term:
            self.highest_term = record.term
        if term_raw is not None and record.term is None:
            self._report(
                "lease",
                obj,
                TERM_KEY,
                f"handoff of node {node}: {TERM_KEY}={term_raw[:40]!r} is not a term (an "
                "integer below 2^31); the next bind on the node rewrites it",
            )
        raw = annotations.get(HANDOFF_KEY)
        if raw != record.raw:
            record.raw = raw
            record.handoff = None
            record.error = None
            record.seen = self._clock()
            if raw is not None and self.decode:
                try:
                    record.handoff = decode_handoff(raw, node=node)
                except CodecError as exc:
                    record.error = str(exc)
                    self._report("lease", obj, HANDOFF_KEY, str(exc))
        self._changed(node)

    def delete(self, obj: ob.Object) -> None:
        node = node_of(obj)
        if node is None:
            return
        version = versions.of(obj)
        record = self.records.get(node)
        if record is not None and 0 < version < versions.number(record.resource_version):
            return  # the deletion of an earlier Lease of that node
        self._gone(node, version)

    def forget(self, node: str, version: str) -> None:
        """The Lease held at *version* is gone (a write conditioned on it, or a read made
        while it was held, answered 404): the next write creates it.

        Its version is buried, so a lagging watch event of it cannot bring its handoff
        back. A newer Lease the watch showed meanwhile (created again) is kept: the answer
        was about the one held at *version*.
        """
        record = self.records.get(node)
        if record is not None and record.resource_version == version:
            self._gone(node, versions.number(version))

    def replace(self, items: Iterable[ob.Object], snapshot: ListSnapshot | None = None) -> None:
        """The whole list (after a relist): Leases missing from it are gone, unless what we
        hold of them is newer than the list (*snapshot*; None: newer than all)."""
        seen = set()
        for obj in items:
            if not isinstance(obj, dict):
                continue
            node = node_of(obj)
            if node is not None:
                seen.add(node)
            self.apply(obj)
        for node, record in list(self.records.items()):
            if node in seen:
                continue
            gone = versions.gone_as_of(versions.number(record.resource_version), snapshot)
            if gone is not None:
                self._gone(node, gone)
        self.synced = True

    def _gone(self, node: str, version: int) -> None:
        """The node's Lease is gone as of *version*: drop it and bury the version."""
        self._tombstones.bury(node, version)
        self._versions.pop(node, None)
        if self.records.pop(node, None) is not None:
            self._changed(node)

    def _changed(self, node: str) -> None:
        for callback in self.on_changed:
            callback(node)

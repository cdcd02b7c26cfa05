"""The cluster as the scheduler knows it: node inventories, pod assignments, node handoffs.

Why here and not in the ledger: the ledger counts usage; this module decides *what* to count
from the watch events of nodes and pods (DESIGN.md §7). It reads our annotations and HAMi's
(so pods HAMi placed count during a migration), keeps a malformed annotation from ever
crashing the process or silently freeing a slice, and tells the bind path when a node's
handoff changes. Every method runs on the event loop and returns without awaiting, so the
ledger is only ever changed between two awaits of the extender's handlers.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from xpushare.codec import (
    AGENT_MODE_KEY,
    ASSIGNMENT_KEY,
    HAMI_ILUVATAR_CHIPS,
    HAMI_KEYS,
    MAX_VALUE_BYTES,
    HamiSlice,
    Handoff,
    decode_assignment,
    decode_hami_node_devices,
    decode_hami_pod_devices,
    decode_inventory,
    hami_keys,
    hami_pod_assignment,
    vendor_of_inventory_key,
)
from xpushare.codec.hami_score import SCORE_KEY, decode_pair_links
from xpushare.errors import CodecError
from xpushare.models import Device, PodAssignment, PodRef
from xpushare.models._compact import compact
from xpushare.scheduler import objects as ob
from xpushare.scheduler import versions
from xpushare.scheduler.drabook import CLAIM_KEY_PREFIX
from xpushare.scheduler.handoffbook import HandoffBook
from xpushare.scheduler.versions import MAX_TOMBSTONES, ListSnapshot, Tombstones
from xpushare.scheduling import UsageLedger
from xpushare.scheduling.quantity import QuantityError, cpu_millis, memory_mib
from xpushare.scheduling.quota import QuotaBook

log = logging.getLogger(__name__)

#: Called with (kind "node"/"pod", object, annotation key, message) for a bad annotation.
Reporter = Callable[[str, ob.Object, str, str], None]
#: Called with (pod, what: "changed"/"removed"/"added", message) when a bound pod's
#: allocation record was edited after the fact: the edit is ignored (docs/scheduler.md).
TamperReporter = Callable[[ob.Object, str, str], None]

# HAMi keys that embed a chip name (research/hami-protocol.md §8.1).
_ASCEND_REGISTER = re.compile(r"^hami\.io/node-register-(Ascend[-A-Za-z0-9_.]*)$")
_ASCEND_POD = re.compile(r"^hami\.io/(Ascend[-A-Za-z0-9_.]*)-devices-allocated$")

#: Node annotation an operator sets to take single devices out of new allocations: their
#: UUIDs, comma-separated (HAMi's, research/hami-protocol.md §2.1); live, no restart.
CORDON_KEY = "hami.io/device-cordon"
#: Devices read from it at most: more than any node has (HAMi reads them all; a value that
#: names more is not a list of one node's devices).
MAX_CORDONED = 1024
#: Longest id taken from it: ids are UUIDs (NVIDIA's ``GPU-<uuid>``: 40 characters).
MAX_DEVICE_ID_CHARS = 256


def cordoned_devices(value: str | None) -> frozenset[str]:
    """The device ids a ``hami.io/device-cordon`` value names (bounded: the first
    :data:`MAX_CORDONED`, each as long as a device id may be)."""
    if not value:
        return frozenset()
    out: set[str] = set()
    for item in value[:MAX_VALUE_BYTES].split(",", MAX_CORDONED)[:MAX_CORDONED]:
        item = item.strip()
        if item and len(item) <= MAX_DEVICE_ID_CHARS:
            out.add(item)
    return frozenset(out)


def _hami_percent(vendor: str, item: HamiSlice) -> int:
    # HAMi records compute units instead of a percent for a few vendors; more than 100 can
    # only mean "all of it", which is what the ledger must hold to stay conservative.
    return min(100, item.cores)


def _older(version: str, than: str) -> bool:
    # resourceVersions are opaque to clients, but every API server serves etcd revisions,
    # which are integers; anything else is never judged older (versions.py).
    a, b = versions.number(version), versions.number(than)
    return bool(a and b and a < b)


@dataclass(slots=True)
class NodeRecord:
    name: str
    resource_version: str = ""
    #: The Node's uid: its handoff Lease names it as owner, so the garbage collector
    #: deletes the Lease with the Node.
    uid: str = ""
    fingerprint: bytes = b""
    memory_sizes: list[tuple[str, int]] = field(default_factory=list)
    #: The Node's status.allocatable CPU (millicores) and memory (MiB), for the web view's
    #: node page only: kube-scheduler books host resources, the extender devices (None:
    #: absent or unreadable).
    cpu_allocatable: int | None = None
    memory_allocatable: int | None = None


@dataclass(slots=True)
class PodRecord:
    key: str
    ref: PodRef
    node: str
    started: bool
    raw: tuple[str, ...] = ()
    #: When the pod got its devices (its PodScheduled time, else when this replica first
    #: counted it), Unix seconds: the web view's "since".
    since: float = 0.0


def _feed(digest: Any, kind: str, key: str, value: str) -> None:
    # Lengths first, so no two different (key, value) lists feed the same bytes.
    for part in (kind, key, value):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)


class ClusterState:
    """Nodes and pods from the watches, feeding a :class:`UsageLedger`."""

    def __init__(
        self,
        ledger: UsageLedger,
        *,
        report: Reporter | None = None,
        clock: Callable[[], float] = time.time,
        quotas: QuotaBook | None = None,
        handoffs: bool = True,
        tamper: TamperReporter | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ledger = ledger
        #: The nodes' handoff Leases (handoffbook.py). Only a process that binds reads them:
        #: a filter worker neither watches nor decodes them.
        self.handoff_book = HandoffBook(report=report, clock=clock, decode=handoffs)
        #: The namespaces' device quotas (``None``: not watched, none enforced).
        self.quotas = quotas
        self._clock = clock
        self.nodes: dict[str, NodeRecord] = {}
        #: Nodes whose agent serves kubelet through DRA (AGENT_MODE_KEY is ``dra``): there
        #: kube-scheduler's allocator books the devices, through claims (docs/dra.md).
        self.dra_nodes: set[str] = set()
        self.pods: dict[str, PodRecord] = {}
        self._by_name: dict[tuple[str, str], str] = {}
        self._report = report or (lambda kind, obj, key, message: None)
        self._tamper = tamper or (lambda obj, what, message: None)
        self._monotonic = monotonic
        #: The newest version seen of every live pod, bound or not: an older event or list
        #: item of it is ignored (client-go's rule; versions.py).
        self._versions: dict[str, int] = {}
        self._pod_tombstones = Tombstones(MAX_TOMBSTONES)
        self._node_tombstones = Tombstones(MAX_TOMBSTONES)
        #: Bound pods that carry no allocation record: one appearing later was not written
        #: by the Binding that bound them (ours copies it in the same write), so it is
        #: forged and ignored.
        self._plain: set[str] = set()
        #: Pods this process bound whose Binding the API server accepted but no event or
        #: read has shown yet, with when the answer came (this process's monotonic clock):
        #: kube-scheduler's assumed pods. A relist requested before then cannot know them.
        self._assumed: dict[str, float] = {}
        self._memory_sizes: dict[str, Counter[int]] = {}
        #: Called with a node name when the node was added, changed or deleted.
        self.on_node_changed: list[Callable[[str], None]] = []
        #: Called with a pod key when the pod was deleted.
        self.on_pod_deleted: list[Callable[[str], None]] = []
        #: Called with a node name when a pod counted there was first seen admitted by
        #: kubelet (objects.started): the node's handoff is free from then on.
        self.on_pod_started: list[Callable[[str], None]] = []
        self.nodes_synced = False
        self.pods_synced = False
        #: Quotas are listed before the first decision, so a restart enforces them at once.
        self.quotas_synced = quotas is None

    @property
    def synced(self) -> bool:
        return self.nodes_synced and self.pods_synced and self.quotas_synced

    # -- quotas ------------------------------------------------------------------------------------

    def apply_quota(self, obj: ob.Object) -> None:
        """A ResourceQuota was added or changed."""
        if self.quotas is None:
            return
        spec = obj.get("spec")
        hard = spec.get("hard") if isinstance(spec, dict) else None
        for problem in self.quotas.set(ob.namespace(obj), ob.name(obj), hard or {}):
            self._report("resourcequota", obj, "spec.hard", problem)

    def delete_quota(self, obj: ob.Object) -> None:
        if self.quotas is not None:
            self.quotas.remove(ob.namespace(obj), ob.name(obj))

    def replace_quotas(self, items: Iterable[ob.Object]) -> None:
        if self.quotas is None:
            return
        objects = [o for o in items if isinstance(o, dict)]
        self.quotas.replace([])
        for obj in objects:
            self.apply_quota(obj)
        self.quotas_synced = True

    # -- queries -----------------------------------------------------------------------------------

    def max_device_memory(self, vendor: str) -> int | None:
        """The largest device memory of *vendor* in the cluster (MiB), None if it has none."""
        sizes = self._memory_sizes.get(vendor)
        return max(sizes) if sizes else None

    def pod_by_name(self, namespace: str, name: str) -> PodRecord | None:
        key = self._by_name.get((namespace, name))
        return self.pods.get(key) if key else None

    def handoff(self, node: str) -> Handoff | None:
        return self.handoff_book.handoff(node)

    def admitted_on(self, node: str, pod: PodRef) -> bool:
        """Whether kubelet has admitted *pod* on *node*, as the pod watch shows it
        (objects.started): every Allocate of it is behind it, so a handoff naming it has
        served (handoff.py)."""
        known = self.pod_by_name(pod.namespace, pod.name)
        return (
            known is not None
            and (not pod.uid or known.ref.uid == pod.uid)
            and known.node == node
            and known.started
        )

    @property
    def highest_term(self) -> int:
        """The highest fencing term any handoff carries: a replica taking the leader Lease
        starts above it even if that Lease was deleted and re-created (leader.py)."""
        return self.handoff_book.highest_term

    # -- nodes -------------------------------------------------------------------------------------

    def _node_devices(self, obj: ob.Object) -> list[Device]:
        node = ob.name(obj)
        ann = ob.annotations_of(obj)
        devices: list[Device] = []
        ours: set[str] = set()
        for key in sorted(ann):
            vendor = vendor_of_inventory_key(key)
            if vendor is None:
                continue
            try:
                inventory = decode_inventory(key, ann[key])
                if inventory.node != node:
                    raise CodecError(
                        f"annotation {key!r} of node {node!r} holds the inventory of node "
                        f"{inventory.node!r} (copied from another node?); the node agent "
                        "rewrites it on its next pass"
                    )
            except CodecError as exc:
                self._report("node", obj, key, str(exc))
                ours.add(vendor)  # a broken inventory of ours is not replaced by HAMi's
                continue
            ours.add(vendor)
            devices.extend(inventory.devices)
        for vendor, key, fmt in self._hami_register_keys(ann):
            if vendor in ours or fmt not in ("json", "legacy"):
                continue
            try:
                devices.extend(decode_hami_node_devices(ann[key], vendor, key=key, node=node))
            except CodecError as exc:
                self._report("node", obj, key, str(exc))
        if SCORE_KEY in ann:
            devices = self._with_pair_scores(obj, ann[SCORE_KEY], devices)
        return devices

    def _with_pair_scores(self, obj: ob.Object, value: str, devices: list[Device]) -> list[Device]:
        """NVIDIA GPUs without links of their own get those of HAMi's pair scores, so the
        topology-aware choice works on nodes HAMi's device plugin registered (an inventory
        of ours carries the links it measured, which win)."""
        try:
            links = decode_pair_links(value, node=ob.name(obj))
        except CodecError as exc:
            self._report("node", obj, SCORE_KEY, str(exc))
            return devices
        return [
            d.model_copy(update={"links": links[d.id]})
            if d.vendor == "nvidia" and not d.links and links.get(d.id)
            else d
            for d in devices
        ]

    @staticmethod
    def _hami_register_keys(ann: dict[str, str]) -> Iterable[tuple[str, str, str | None]]:
        for vendor, keys in HAMI_KEYS.items():
            if keys.register and keys.register in ann:
                yield vendor, keys.register, keys.register_format
        for chip in HAMI_ILUVATAR_CHIPS:
            keys = hami_keys("iluvatar", chip)
            if keys.register and keys.register in ann:
                yield "iluvatar", keys.register, keys.register_format
        for key in ann:
            if _ASCEND_REGISTER.match(key):
                yield "ascend", key, "json"

    def _fingerprint(self, obj: ob.Object) -> bytes:
        """A digest of what the node's devices are decoded from (inventories and labels).

        A digest, not the values: those are kilobytes a node (an inventory of 8 GPUs is
        ~2 KB), kept for every node for the life of the process only to be compared.
        """
        ann = ob.annotations_of(obj)
        digest = hashlib.blake2b(digest_size=16)
        for k, v in sorted(ann.items()):
            if (
                k.startswith("xpushare.io/inventory-")
                or k.startswith("hami.io/node-")
                or k in ("metax-tech.com/node-gpu-devices", CORDON_KEY)
            ):
                _feed(digest, "a", k, v)
        for k, v in sorted(ob.labels_of(obj).items()):
            _feed(digest, "l", k, v)
        return digest.digest()

    def apply_node(self, obj: ob.Object) -> None:
        """A node was added or changed."""
        name = ob.name(obj)
        if not name:
            return
        version = ob.resource_version(obj)
        buried = self._node_tombstones.get(name)
        if buried is not None and 0 < versions.number(version) <= buried:
            return  # an event from before the node was deleted
        record = self.nodes.get(name)
        if record is None:
            record = self.nodes[name] = NodeRecord(name)
        if _older(version, record.resource_version) or (
            version and version == record.resource_version
        ):
            # Our own patch already applied this state or a newer one: the watch's echo of
            # it changes nothing, and a late event must not bring the old handoff back.
            return
        record.resource_version = version
        record.uid = ob.uid(obj)
        record.cpu_allocatable, record.memory_allocatable = _allocatable(obj)
        fingerprint = self._fingerprint(obj)
        if fingerprint != record.fingerprint or self.ledger.node(name) is None:
            record.fingerprint = fingerprint
            devices = self._node_devices(obj)
            self._set_sizes(record, [(d.vendor, d.memory_mib) for d in devices])
            self.ledger.set_node(
                name,
                devices,
                labels=ob.labels_of(obj),
                cordoned=cordoned_devices(ob.annotations_of(obj).get(CORDON_KEY)),
            )
        annotations = ob.annotations_of(obj)
        # Exactly "dra": anything else (absent, garbled) is the device-plugin path, the
        # one that books at /bind, so a bad value can only make a bind wait, never skip it.
        if annotations.get(AGENT_MODE_KEY) == "dra":
            self.dra_nodes.add(name)
        else:
            self.dra_nodes.discard(name)
        for callback in self.on_node_changed:
            callback(name)

    def delete_node(self, obj: ob.Object) -> None:
        name = ob.name(obj)
        version = versions.of(obj)
        record = self.nodes.get(name)
        if record is not None and 0 < version < versions.number(record.resource_version):
            return  # the deletion of an earlier node of that name
        self._node_tombstones.bury(name, version)
        record = self.nodes.pop(name, None)
        if record is not None:
            self._set_sizes(record, [])
        self.dra_nodes.discard(name)
        self.ledger.remove_node(name)
        for callback in self.on_node_changed:
            callback(name)

    def replace_nodes(
        self, items: Iterable[ob.Object], snapshot: ListSnapshot | None = None
    ) -> None:
        """The whole node list (after a relist): nodes missing from it are gone, unless
        what we hold of them is newer than the list (*snapshot*; None: newer than all)."""
        seen = set()
        for obj in items:
            seen.add(ob.name(obj))
            self.apply_node(obj)
        for name, record in list(self.nodes.items()):
            if name in seen:
                continue
            gone = versions.gone_as_of(versions.number(record.resource_version), snapshot)
            if gone is not None:  # else added or changed after the list's snapshot
                self.delete_node({"metadata": {"name": name, "resourceVersion": str(gone or "")}})
        self.nodes_synced = True

    def _set_sizes(self, record: NodeRecord, sizes: list[tuple[str, int]]) -> None:
        for vendor, size in record.memory_sizes:
            counter = self._memory_sizes[vendor]
            counter[size] -= 1
            if counter[size] <= 0:
                del counter[size]
        for vendor, size in sizes:
            self._memory_sizes.setdefault(vendor, Counter())[size] += 1
        record.memory_sizes = sizes

    # -- pods --------------------------------------------------------------------------------------

    @staticmethod
    def _hami_pod_keys(ann: dict[str, str]) -> list[tuple[str, str]]:
        found = [
            (vendor, keys.allocated) for vendor, keys in HAMI_KEYS.items() if keys.allocated in ann
        ]
        for chip in HAMI_ILUVATAR_CHIPS:
            keys = hami_keys("iluvatar", chip)
            if keys.allocated in ann:
                found.append(("iluvatar", keys.allocated))
        found.extend(("ascend", key) for key in ann if _ASCEND_POD.match(key))
        return found

    def pod_assignment(self, obj: ob.Object) -> PodAssignment | None:
        """What a pod holds on its node, from our annotation or HAMi's; CodecError if bad."""
        if ob.phase(obj) in ob.FINISHED_PHASES:
            return None
        ann = ob.annotations_of(obj)
        who = f"{ob.namespace(obj)}/{ob.name(obj)}"
        node = ob.node_name(obj)
        if ASSIGNMENT_KEY in ann:
            if not node:
                # Not bound: our bind writes the annotation and the node in one write, so
                # this is a copy (e.g. a pod re-created from `kubectl get -o yaml`).
                return None
            assignment = decode_assignment(ann[ASSIGNMENT_KEY], pod=who)
            if assignment.node != node:
                raise CodecError(
                    f"annotation {ASSIGNMENT_KEY!r} of pod {who!r} names node "
                    f"{assignment.node!r} but the pod is bound to node {node!r}; its devices "
                    "are not counted: delete the pod so it is scheduled again"
                )
            return assignment
        hami = self._hami_pod_keys(ann)
        if not hami:
            return None
        node = node or ann.get("hami.io/vgpu-node", "")
        if not node:
            return None
        decoded = {
            vendor: decode_hami_pod_devices(ann[key], vendor, key=key, pod=who)
            for vendor, key in hami
        }
        names = [str(c.get("name", "")) for c, init, _ in ob.containers(obj) if not init]
        inits = [str(c.get("name", "")) for c, init, _ in ob.containers(obj) if init]
        return hami_pod_assignment(node, decoded, names, inits, pod=who, to_percent=_hami_percent)

    def _raw(self, obj: ob.Object) -> tuple[str, ...]:
        ann = ob.annotations_of(obj)
        parts = [ob.phase(obj), ob.node_name(obj), ann.get(ASSIGNMENT_KEY, "")]
        if any(k.startswith("hami.io/") for k in ann):
            parts.extend(f"{k}={v}" for k, v in sorted(ann.items()) if k.startswith("hami.io/"))
        return tuple(parts)

    def apply_pod(self, obj: ob.Object) -> None:
        """A pod was added or changed (an event, a list item, or the answer of a read).

        A view older than what is held is ignored, and only evidence newer than a booking
        releases it: the pod seen finished or deleted. A pod's node never changes once set,
        so a view of it unbound is always older than its binding (a late ADDED, a list
        taken before the Binding) and never frees what it holds. A bound pod's allocation
        record is immutable: the first value counted holds (docs/scheduler.md, "State").
        """
        key = ob.pod_key(obj)
        if not versions.advance(self._versions, self._pod_tombstones, key, versions.of(obj)):
            return  # this view or a newer one was applied already
        record = self.pods.get(key)
        raw = self._raw(obj)
        if record is not None and record.raw == raw:
            self._set_started(record, obj)
            return
        try:
            assignment = self.pod_assignment(obj)
        except (CodecError, ValueError) as exc:
            self._report("pod", obj, ASSIGNMENT_KEY, str(exc))
            # Keep what was counted: freeing a slice because someone garbled an annotation
            # would let another pod have it while this one still runs on it.
            if record is not None:
                record.raw = raw
            return
        entry = self.ledger.entry(key)
        if ob.phase(obj) in ob.FINISHED_PHASES:
            # Newer evidence: the pod's containers are over, its devices are free.
            if entry is not None:
                self.ledger.remove(key)
            self._assumed.pop(key, None)
            self._plain.discard(key)
            self._forget(key)
            return
        # The booking the API server confirmed (not a reservation of a bind in flight).
        booked = entry if entry is not None and not entry.reserved else None
        if assignment is None:
            if not ob.node_name(obj):
                # Not bound in this view: pending, or a view from before its Binding. It
                # holds nothing, and frees nothing it holds.
                return
            if booked is not None:
                self._tampered(obj, booked.node, record, raw, "removed")
                return
            self._plain.add(key)
            return
        namespace = ob.namespace(obj)
        if booked is not None:
            if booked.assignment is not assignment and booked.assignment != assignment:
                self._tampered(obj, booked.node, record, raw, "changed")
                return
        elif key in self._plain:
            # Bound without one, and the Binding is the only write of ours that adds it.
            self._tampered(obj, assignment.node, record, raw, "added")
            return
        elif (
            entry is not None
            and entry.namespace == namespace
            and (entry.assignment is assignment or entry.assignment == assignment)
        ):
            # The bind this process (or its leader) reserved, now seen bound: the same
            # slices, so the booking stays as it is (as the leader's own confirm after the
            # Binding does) instead of being taken off and put back, which would change
            # the node's state twice and make every verdict about it be worked out again.
            self.ledger.confirm(key)
        else:
            # New, or a reservation of ours that another writer's Binding beat (an older
            # term's): what the API server shows wins.
            self.ledger.add(key, assignment, namespace=namespace)
        self._assumed.pop(key, None)
        if record is None:
            record = self._remember(key, obj, assignment.node)
        record.node = assignment.node
        self._set_started(record, obj)
        record.raw = raw

    def _set_started(self, record: PodRecord, obj: ob.Object) -> None:
        started = ob.started(obj)
        if started and not record.started:
            record.started = True
            for callback in self.on_pod_started:
                callback(record.node)
        else:
            record.started = started

    def _remember(self, key: str, obj: ob.Object, node: str) -> PodRecord:
        """A new record of a counted pod on *node*."""
        record = PodRecord(
            key,
            compact(ob.pod_ref(obj)),
            node,
            False,
            since=ob.bound_since(obj) or self._clock(),
        )
        self.pods[key] = record
        self._by_name[(record.ref.namespace, record.ref.name)] = key
        self._set_started(record, obj)
        return record

    def _tampered(
        self, obj: ob.Object, node: str, record: PodRecord | None, raw: tuple[str, ...], what: str
    ) -> None:
        """A bound pod's allocation record was edited: keep the booking, tell the operator."""
        key = ob.pod_key(obj)
        who = f"{ob.namespace(obj)}/{ob.name(obj)}"
        if what == "added":
            message = (
                f"pod {who} was bound to node {node or ob.node_name(obj)} without an "
                f"allocation and {ASSIGNMENT_KEY!r} (or HAMi's) was added afterwards: it is "
                "ignored. Only xpushare's scheduler writes it, in the Binding; check who may "
                "patch pods (docs/install.md, RBAC)"
            )
        else:
            message = (
                f"the allocation record of pod {who} on node {node} was {what} after it was "
                "bound: ignored, its devices stay booked as first recorded. Only xpushare's "
                "scheduler may write it; check who may patch pods (docs/install.md, RBAC)"
            )
        self._tamper(obj, what, message)
        self._assumed.pop(key, None)
        if record is None and what != "added":
            record = self._remember(key, obj, node)
        if record is not None:
            self._set_started(record, obj)
            record.raw = raw

    def assume(self, key: str) -> None:
        """Our Binding of *key* was accepted: hold its booking until the API server shows
        the pod (a relist requested before now cannot contain the binding)."""
        if key not in self.pods:
            self._assumed[key] = self._monotonic()

    def _forget(self, key: str) -> None:
        record = self.pods.pop(key, None)
        if record is not None:
            self._by_name.pop((record.ref.namespace, record.ref.name), None)

    def _drop(self, key: str, version: int) -> None:
        """The pod is gone as of *version*: free its booking and remember its deletion."""
        self._pod_tombstones.bury(key, version)
        self._versions.pop(key, None)
        self._plain.discard(key)
        self._assumed.pop(key, None)
        self.ledger.remove(key)
        self._forget(key)
        for callback in self.on_pod_deleted:
            callback(key)

    def delete_pod(self, obj: ob.Object) -> None:
        key = ob.pod_key(obj)
        version = versions.of(obj)
        held = self._versions.get(key, 0)
        if 0 < version < held:
            return  # the deletion of an earlier pod of that key (one without a UID)
        self._drop(key, version or held)

    def replace_pods(
        self, items: Iterable[ob.Object], snapshot: ListSnapshot | None = None
    ) -> None:
        """The whole pod list (after a relist): what it shows is applied (in version
        order, as any view), and a pod missing from it is gone only if the list is newer
        than everything held of it (*snapshot*; None: a list newer than everything).

        Reservations stay: their bind is in flight and settles them itself. Assumed pods
        (bound here, not shown yet) stay unless the list was requested after their
        Binding was answered.
        """
        seen = set()
        for obj in items:
            seen.add(ob.pod_key(obj))
            self.apply_pod(obj)
        listed = snapshot.version if snapshot is not None else 0
        keys = set(self._versions)
        keys.update(e.key for e in self.ledger.entries() if not e.key.startswith(CLAIM_KEY_PREFIX))
        for key in keys:
            if key in seen:
                continue
            entry = self.ledger.entry(key)
            if entry is not None and entry.reserved:
                continue
            assumed = self._assumed.get(key)
            if assumed is not None:
                if snapshot is not None and assumed >= snapshot.started:
                    continue  # bound after the list was requested
            else:
                held = self._versions.get(key, 0)
                if listed and held > listed:
                    continue  # seen at a version newer than the list
            self._drop(key, listed or self._versions.get(key, 0))
        self.pods_synced = True


def _allocatable(obj: ob.Object) -> tuple[int | None, int | None]:
    """A Node's allocatable CPU (millicores) and memory (MiB); None for what is absent or
    not a quantity (shown as unknown, never an error: nothing is decided by it)."""
    status = obj.get("status")
    allocatable = status.get("allocatable") if isinstance(status, dict) else None
    if not isinstance(allocatable, dict):
        return None, None
    out: list[int | None] = []
    for key, read in (
        ("cpu", cpu_millis),
        ("memory", lambda v: memory_mib(v, round_up=False)),
    ):
        value = allocatable.get(key)
        try:
            out.append(None if value is None else int(read(value)))
        except (QuantityError, TypeError):
            out.append(None)
    return out[0], out[1]

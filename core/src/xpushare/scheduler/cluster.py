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
    HANDOFF_KEY,
    MAX_VALUE_BYTES,
    TERM_KEY,
    HamiSlice,
    Handoff,
    decode_assignment,
    decode_hami_node_devices,
    decode_hami_pod_devices,
    decode_handoff,
    decode_inventory,
    hami_keys,
    hami_pod_assignment,
    parse_term,
    vendor_of_inventory_key,
)
from xpushare.codec.hami_score import SCORE_KEY, decode_pair_links
from xpushare.errors import CodecError
from xpushare.models import Device, PodAssignment, PodRef
from xpushare.models._compact import compact
from xpushare.scheduler import objects as ob
from xpushare.scheduler.drabook import CLAIM_KEY_PREFIX
from xpushare.scheduling import UsageLedger
from xpushare.scheduling.quota import QuotaBook

log = logging.getLogger(__name__)

#: Called with (kind "node"/"pod", object, annotation key, message) for a bad annotation.
Reporter = Callable[[str, ob.Object, str, str], None]

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
    # which are integers; anything else is never judged older.
    return version.isdigit() and than.isdigit() and int(version) < int(than)


@dataclass(slots=True)
class NodeRecord:
    name: str
    resource_version: str = ""
    fingerprint: bytes = b""
    handoff_raw: str | None = None
    handoff: Handoff | None = None
    handoff_error: str | None = None
    #: When this replica first saw the current handoff value (its own clock, Unix seconds):
    #: the handoff's own times are the writer's clock, so they are bounded by this one.
    handoff_seen: float = 0.0
    #: The fencing token of the last scheduler replica that wrote the node (TERM_KEY).
    term: int | None = None
    memory_sizes: list[tuple[str, int]] = field(default_factory=list)


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
    ) -> None:
        self.ledger = ledger
        #: Whether nodes' handoffs are read (``NodeRecord.handoff``): only a process that
        #: binds waits for them; a filter worker keeps the raw value and decodes nothing
        #: (one decode a bind, a tenth of a millisecond it never uses).
        self.handoffs = handoffs
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
        self._memory_sizes: dict[str, Counter[int]] = {}
        #: Called with a node name when the node's handoff annotation or version changed.
        self.on_node_changed: list[Callable[[str], None]] = []
        #: Called with a pod key when the pod was deleted.
        self.on_pod_deleted: list[Callable[[str], None]] = []
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
        record = self.nodes.get(node)
        return record.handoff if record else None

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
        record = self.nodes.get(name)
        if record is None:
            record = self.nodes[name] = NodeRecord(name)
        version = ob.resource_version(obj)
        if _older(version, record.resource_version) or (
            version and version == record.resource_version
        ):
            # Our own patch already applied this state or a newer one: the watch's echo of
            # it changes nothing, and a late event must not bring the old handoff back.
            return
        record.resource_version = version
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
        term_raw = annotations.get(TERM_KEY)
        record.term = parse_term(term_raw)
        if term_raw is not None and record.term is None:
            self._report(
                "node",
                obj,
                TERM_KEY,
                f"node {name}: {TERM_KEY}={term_raw[:40]!r} is "
                "not a term (an integer below 2^31); the next bind on the node rewrites it",
            )
        raw = annotations.get(HANDOFF_KEY)
        if raw != record.handoff_raw:
            record.handoff_raw = raw
            record.handoff = None
            record.handoff_error = None
            record.handoff_seen = self._clock()
            if raw is not None and self.handoffs:
                try:
                    record.handoff = decode_handoff(raw, node=name)
                except CodecError as exc:
                    record.handoff_error = str(exc)
                    self._report("node", obj, HANDOFF_KEY, str(exc))
        for callback in self.on_node_changed:
            callback(name)

    def delete_node(self, obj: ob.Object) -> None:
        name = ob.name(obj)
        record = self.nodes.pop(name, None)
        if record is not None:
            self._set_sizes(record, [])
        self.dra_nodes.discard(name)
        self.ledger.remove_node(name)
        for callback in self.on_node_changed:
            callback(name)

    def replace_nodes(self, items: Iterable[ob.Object]) -> None:
        """The whole node list (after a relist): nodes missing from it are gone."""
        seen = set()
        for obj in items:
            seen.add(ob.name(obj))
            self.apply_node(obj)
        for name in [n for n in self.nodes if n not in seen]:
            self.delete_node({"metadata": {"name": name}})
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
        """A pod was added or changed."""
        key = ob.pod_key(obj)
        record = self.pods.get(key)
        raw = self._raw(obj)
        if record is not None and record.raw == raw:
            record.started = ob.started(obj)
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
        if assignment is None:
            finished = ob.phase(obj) in ob.FINISHED_PHASES
            if entry is not None and (finished or not entry.reserved):
                self.ledger.remove(key)
            self._forget(key)
            return
        namespace = ob.namespace(obj)
        if (
            entry is not None
            and entry.reserved
            and entry.namespace == namespace
            and (entry.assignment is assignment or entry.assignment == assignment)
        ):
            # The bind this process (or its leader) reserved, now seen bound: the same
            # slices, so the booking stays as it is (as the leader's own confirm after the
            # Binding does) instead of being taken off and put back, which would change
            # the node's state twice and make every verdict about it be worked out again.
            self.ledger.confirm(key)
        elif entry is None or entry.reserved or entry.assignment != assignment:
            self.ledger.add(key, assignment, namespace=namespace)
        if record is None:
            record = PodRecord(
                key,
                compact(ob.pod_ref(obj)),
                assignment.node,
                ob.started(obj),
                since=ob.bound_since(obj) or self._clock(),
            )
            self.pods[key] = record
            self._by_name[(record.ref.namespace, record.ref.name)] = key
        record.node = assignment.node
        record.started = ob.started(obj)
        record.raw = raw

    def _forget(self, key: str) -> None:
        record = self.pods.pop(key, None)
        if record is not None:
            self._by_name.pop((record.ref.namespace, record.ref.name), None)

    def delete_pod(self, obj: ob.Object) -> None:
        key = ob.pod_key(obj)
        self.ledger.remove(key)
        self._forget(key)
        for callback in self.on_pod_deleted:
            callback(key)

    def replace_pods(self, items: Iterable[ob.Object]) -> None:
        """The whole pod list (after a relist): bound pods missing from it are gone.

        Reservations stay: their bind is in flight and settles them itself.
        """
        seen = set()
        for obj in items:
            seen.add(ob.pod_key(obj))
            self.apply_pod(obj)
        for entry in list(self.ledger.entries()):
            if entry.key.startswith(CLAIM_KEY_PREFIX):
                continue  # a DRA claim's devices, the claim book's (drabook.py)
            if entry.key not in seen and not entry.reserved:
                self.ledger.remove(entry.key)
                self._forget(entry.key)
                for callback in self.on_pod_deleted:
                    callback(entry.key)
        self.pods_synced = True

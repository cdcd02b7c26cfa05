"""DRA mode's usage: the devices allocated ResourceClaims hold, booked into the usage ledger.

Why a book of its own, beside the pods' (cluster.py): in DRA mode kube-scheduler allocates
devices and writes the choice into the claim (status.allocation), not into the pod, and
several pods may share one claim. So the ledger gets one entry per allocated claim, keyed by
the claim's UID (:data:`CLAIM_KEY_PREFIX`), never per pod: a claim shared by two pods is
counted once. The entry books each device the claim's results name with the capacity the
result consumed, exactly as a pod's assignment books its slices, so the extender's
``/prioritize`` (and ``/filter``, as a fit check) ranks nodes with the same policy in both
modes. An entry goes when its claim is deallocated or deleted, and the first list after a
restart rebuilds every entry.

Claims are ordered by resourceVersion exactly as pods are (versions.py, client-go's
reflector): an event or list item at or below the version held of a claim is ignored, a
deleted claim's version is remembered so a late view cannot bring it back, and a relist
takes away only the claims its snapshot is newer than. No write of ours allocates a claim
(kube-scheduler's allocator does, and our /bind books nothing on a DRA node), so no claim is
ever assumed; a relist of claims touches claim entries only, never the reservations and
assumed bookings of our own binds (cluster.py).

A result names a device by (driver, pool, device name); the ledger knows devices by the ids
of the node's inventory annotation. Our ResourceSlices carry that id as the ``uuid``
attribute (node/dra/slices.py), so the book watches them too. A claim whose devices no slice
or inventory names yet is kept pending and booked when they appear.

Every method runs on the event loop and returns without awaiting, like cluster.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xpushare.models import PodAssignment, PodView
from xpushare.models.assignment import ContainerAssignment, DeviceSlice
from xpushare.models.request import ContainerRequest
from xpushare.scheduler import objects as ob
from xpushare.scheduler import versions
from xpushare.scheduler.claims import (
    Allocation,
    SliceDevice,
    claim_allocation,
    claim_requests,
    pod_claim_names,
    slice_devices,
)
from xpushare.scheduler.versions import MAX_TOMBSTONES, ListSnapshot, Tombstones
from xpushare.scheduling import PodRequest
from xpushare.scheduling.podpolicy import pod_policy

if TYPE_CHECKING:
    from xpushare.scheduling import UsageLedger

log = logging.getLogger(__name__)

#: Ledger keys of claims: a pod's key is its UID or namespace/name, never this.
CLAIM_KEY_PREFIX = "dra-claim:"

#: Called with (kind "resourceclaim"/"resourceslice", object, field, message) for a bad one.
Reporter = Callable[[str, ob.Object, str, str], None]

DeviceKey = tuple[str, str, str]  # (driver, pool, device name)


@dataclass(slots=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    #: What it asks of our drivers while unallocated (scores a pod that names it).
    requests: tuple[ContainerRequest, ...]
    allocation: Allocation | None


class ClaimBook:
    """ResourceClaims and ResourceSlices from the watches, feeding a :class:`UsageLedger`."""

    def __init__(
        self,
        ledger: UsageLedger,
        vendors: Iterable[str],
        *,
        report: Reporter | None = None,
    ) -> None:
        self.ledger = ledger
        self.vendors = frozenset(vendors)
        self._report = report or (lambda kind, obj, key, message: None)
        self.claims: dict[str, ClaimRecord] = {}
        self._by_name: dict[tuple[str, str], str] = {}
        #: Slice name -> the devices it names; a device may be named by two slices of one
        #: pool while the agent replaces a generation, so lookups take any of them.
        self._slices: dict[str, dict[DeviceKey, SliceDevice]] = {}
        self._devices: dict[DeviceKey, dict[str, SliceDevice]] = {}
        #: UIDs of claims allocated on a device not known yet: booked once it is. A set, so
        #: a node or slice event costs nothing while no claim waits (node events come with
        #: every bind's handoff).
        self._pending: set[str] = set()
        #: The newest version seen of every live claim, ours or not: an older event or list
        #: item of it is ignored (client-go's rule; versions.py).
        self._versions: dict[str, int] = {}
        self._tombstones = Tombstones(MAX_TOMBSTONES)
        self.claims_synced = False
        self.slices_synced = False

    @property
    def pending(self) -> frozenset[str]:
        """UIDs of allocated claims not booked yet (a device no slice or inventory names)."""
        return frozenset(self._pending)

    @property
    def synced(self) -> bool:
        return self.claims_synced and self.slices_synced

    @staticmethod
    def key(uid: str) -> str:
        return CLAIM_KEY_PREFIX + uid

    # -- slices ------------------------------------------------------------------------------------

    def apply_slice(self, obj: ob.Object) -> None:
        name = ob.name(obj)
        if not name:
            return
        try:
            devices = slice_devices(obj, self.vendors)
        except ValueError as exc:
            # Keep what the slice named before: a garbled slice must not unmap devices.
            self._report("resourceslice", obj, "spec.devices", str(exc))
            return
        self._forget_slice(name)
        if not devices:
            return
        self._slices[name] = devices
        for key, device in devices.items():
            self._devices.setdefault(key, {})[name] = device
        self._retry_pending()

    def delete_slice(self, obj: ob.Object) -> None:
        # Booked claims keep their devices: a claim holds its device whether or not the
        # agent is republishing its slices (kubelet deletes them on every restart).
        self._forget_slice(ob.name(obj))

    def replace_slices(self, items: Iterable[ob.Object]) -> None:
        seen = set()
        for obj in items:
            seen.add(ob.name(obj))
            self.apply_slice(obj)
        for name in [n for n in self._slices if n not in seen]:
            self._forget_slice(name)
        self.slices_synced = True

    def _forget_slice(self, name: str) -> None:
        for key in self._slices.pop(name, {}):
            named = self._devices.get(key)
            if named is not None:
                named.pop(name, None)
                if not named:
                    del self._devices[key]

    def node_changed(self, node: str) -> None:
        """A node's inventory may have changed: devices of pending claims may be known now."""
        if self._pending:
            self._retry_pending()

    # -- claims ------------------------------------------------------------------------------------

    def apply_claim(self, obj: ob.Object) -> None:
        """A claim was added or changed (an event or a list item); a view at or below the
        version held of it, or of its deletion, is ignored."""
        uid = ob.uid(obj)
        if not uid:
            return
        if not versions.advance(self._versions, self._tombstones, uid, versions.of(obj)):
            return  # this view or a newer one was applied already
        record = self.claims.get(uid)
        try:
            requests = claim_requests(obj, self.vendors)
        except ValueError as exc:
            # Scores only: a pod naming it is ranked as if it asked for nothing of ours.
            self._report("resourceclaim", obj, "spec.devices.requests", str(exc))
            requests = ()
        try:
            allocation = claim_allocation(obj, self.vendors)
        except ValueError as exc:
            # Keep what was booked: freeing a device because its claim's status is garbled
            # would let another claim have it while this one's pods still run on it.
            self._report("resourceclaim", obj, "status.allocation", str(exc))
            if record is not None:
                record.requests = requests
            return
        if not requests and allocation is None:
            # Not ours (its version stays held: an older view of it must not come back).
            self._forget(uid)
            return
        if record is None:
            record = ClaimRecord(uid, ob.namespace(obj), ob.name(obj), requests, allocation)
            self.claims[uid] = record
            self._by_name[(record.namespace, record.name)] = uid
        else:
            record.requests = requests
            record.allocation = allocation
        self._book(record, obj)

    def delete_claim(self, obj: ob.Object) -> None:
        uid = ob.uid(obj)
        version = versions.of(obj)
        held = self._versions.get(uid, 0)
        if 0 < version < held:
            return  # a view of the deletion older than what is held: newer facts win
        self._delete(uid, version or held)

    def replace_claims(
        self, items: Iterable[ob.Object], snapshot: ListSnapshot | None = None
    ) -> None:
        """The whole claim list (after a relist): what it shows is applied (in version
        order, as any event), and a claim missing from it is gone only if the list is newer
        than everything held of it (*snapshot*; None: a list newer than everything)."""
        seen = set()
        for obj in items:
            seen.add(ob.uid(obj))
            self.apply_claim(obj)
        for uid in [u for u in {*self._versions, *self.claims} if u not in seen]:
            gone = versions.gone_as_of(self._versions.get(uid, 0), snapshot)
            if gone is not None:  # else seen at a version newer than the list: not gone
                self._delete(uid, gone)
        # Entries of claims this process never saw listed (none in practice: the ledger is
        # this process's own) are dropped too, so the ledger holds exactly the list.
        for entry in list(self.ledger.entries()):
            uid = entry.key[len(CLAIM_KEY_PREFIX) :]
            if entry.key.startswith(CLAIM_KEY_PREFIX) and uid not in self.claims:
                self.ledger.remove(entry.key)
        self.claims_synced = True

    def _delete(self, uid: str, version: int) -> None:
        """The claim is gone as of *version*: free its booking and remember its deletion."""
        self._tombstones.bury(uid, version)
        self._versions.pop(uid, None)
        self._forget(uid)

    def _forget(self, uid: str) -> None:
        record = self.claims.pop(uid, None)
        self._pending.discard(uid)
        if record is not None:
            self._by_name.pop((record.namespace, record.name), None)
        self.ledger.remove(self.key(uid))

    def _retry_pending(self) -> None:
        for uid in list(self._pending):
            record = self.claims.get(uid)
            if record is None:
                self._pending.discard(uid)
            else:
                self._book(record, None)

    def _book(self, record: ClaimRecord, obj: ob.Object | None) -> None:
        key = self.key(record.uid)
        self._pending.discard(record.uid)
        if record.allocation is None:
            self.ledger.remove(key)
            return
        try:
            assignment = self._assignment(record, record.allocation)
        except ValueError as exc:
            self._report(
                "resourceclaim",
                obj or {"metadata": {"name": record.name, "namespace": record.namespace}},
                "status.allocation",
                str(exc),
            )
            return
        if assignment is None:
            self._pending.add(record.uid)
            return
        entry = self.ledger.entry(key)
        if entry is None or entry.assignment != assignment:
            self.ledger.add(key, assignment, namespace=record.namespace)

    def _resolve(
        self, node_hint: str, vendor: str, key: DeviceKey
    ) -> tuple[str, str, int | None] | None:
        """(node, device id, device memory MiB if known) of a result's device, if known yet."""
        named = self._devices.get(key)
        if named:
            found = next(reversed(named.values()))
            node = found.node or node_hint or key[1]
            memory = found.memory_mib
            for device in self.ledger.devices(node, vendor):
                if device.id == found.uuid:
                    memory = device.memory_mib
                    break
            return node, found.uuid, memory
        # No slice (yet): our device names are the inventory ids lower-cased when those are
        # DNS labels already (node/dra/slices.py ``device_name``), and the pool is the node.
        node = node_hint or key[1]
        for device in self.ledger.devices(node, vendor):
            if device.id.lower() == key[2]:
                return node, device.id, device.memory_mib
        return None

    def _assignment(self, record: ClaimRecord, allocation: Allocation) -> PodAssignment | None:
        nodes: set[str] = set()
        per_request: dict[tuple[str, str], list[DeviceSlice]] = {}
        for result in allocation.devices:
            found = self._resolve(
                allocation.node, result.vendor, (result.driver, result.pool, result.device)
            )
            if found is None:
                return None
            node, device_id, device_memory = found
            nodes.add(node)
            memory = device_memory if result.memory_mib is None else result.memory_mib
            if memory is None:
                return None  # a whole device whose size neither the slice nor inventory says
            per_request.setdefault((result.request, result.vendor), []).append(
                DeviceSlice(
                    device_id=device_id,
                    memory_mib=memory,
                    compute_percent=result.compute_percent,
                    exclusive=result.exclusive,
                )
            )
        if len(nodes) != 1:
            raise ValueError(
                f"ResourceClaim {record.namespace}/{record.name}: its allocation results name "
                f"devices of {len(nodes)} nodes ({', '.join(sorted(nodes)[:4])}); a node-local "
                "driver's claim has them all on one node, so it is not booked"
            )
        (node,) = nodes
        return PodAssignment(
            node=node,
            containers=tuple(
                ContainerAssignment(container=request, vendor=vendor, devices=tuple(slices))
                for (request, vendor), slices in sorted(per_request.items())
            ),
        )

    # -- pods --------------------------------------------------------------------------------------

    def request_for(self, pod: Any, view: PodView) -> PodRequest | None:
        """The device request of a DRA pod: what its claims ask of our drivers and is not
        allocated yet; ``None`` for a pod that names none, or before the first list."""
        if not self.synced:
            return None
        requests: list[ContainerRequest] = []
        for name in pod_claim_names(pod):
            uid = self._by_name.get((view.ref.namespace, name))
            record = self.claims.get(uid) if uid else None
            if record is None or record.allocation is not None:
                # Not ours, or allocated already (a claim shared with a pod placed before):
                # nothing new to book, and its node is fixed by its allocation.
                continue
            requests.extend(
                r.model_copy(update={"container": f"{name}/{r.container}"}) for r in record.requests
            )
        if not requests:
            return None
        try:
            policy = pod_policy(view.annotations) if view.annotations else None
        except ValueError:
            policy = None  # the device-plugin path reports it; DRA pods rank with the default
        return PodRequest.build(requests, pod=view.ref, policy=policy)

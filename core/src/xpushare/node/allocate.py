"""Allocate and GetPreferredAllocation: which pod kubelet is admitting, and what it gets.

kubelet's Allocate names device ids only, never the pod (research/k8s-apis.md §1.4 step 7).
So, as DESIGN.md §6 fixes, the scheduler writes at bind a per-node *handoff* naming the pod,
and the pod's *assignment* naming each container's slices. This module:

1. finds the pod: the one named by the ``xpushare.io/handoff`` of the node's handoff Lease
   (``handoff.<node>``, scheduler/handoffbook.py) if it is current and
   still waits for this vendor (not admitted by kubelet yet, and not served here); else (the
   handoff expired, has served its pod, or is malformed) the oldest Pending pod on the node
   whose assignment still has a container of this vendor to serve;
2. matches kubelet's request to a container: kubelet's ids ``<device>::<n>`` name physical
   devices, which must be exactly the devices of the next container of this vendor that has
   not been served yet (init containers first, in assignment order, as kubelet admits them);
   GetPreferredAllocation steers kubelet to those devices, so a mismatch means the pod and
   kubelet disagree and is refused with both sides named;
3. asks the vendor's ``allocate`` hook (on its library thread) for the container's envs,
   device nodes, mounts and CDI devices;
4. writes nothing back. The handoff stays until the scheduler's next bind on the node
   replaces it, which it does once kubelet's status write shows the pod admitted
   (``status.startTime``: kubelet writes it after every Allocate of the pod, DESIGN.md §6).
   Until then this agent knows the pod is served from its own record of the containers it
   served, and from the pod's ``startTime`` after a restart of the agent.

Everything runs under Allocate's own deadline: kubelet waits with no timeout inside its pod
admission loop, so an answer is always an error or a result within
:attr:`~xpushare.node.config.NodeConfig.allocate_deadline_s`, never a block.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from xpushare.codec import (
    ASSIGNMENT_KEY,
    HANDOFF_KEY,
    TERM_KEY,
    decode_assignment,
    decode_handoff,
    parse_term,
)
from xpushare.errors import CodecError, PluginError, VendorUnavailable, XpushareError
from xpushare.models import (
    AllocatedContainer,
    AllocateRequest,
    ContainerAllocation,
    ContainerAssignment,
    PodRef,
)
from xpushare.native import LibraryThreadStuck, NativeCallTimeout, NativeError
from xpushare.node.devices import physical_id
from xpushare.node.grpcerrors import summarize
from xpushare.node.kube import KubeError
from xpushare.node.ledger import LedgerError, pod_key

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from xpushare.models import Device, PodAssignment
    from xpushare.node.devices import VendorDevices
    from xpushare.node.kube import JsonObject, NodeKube
    from xpushare.node.ledger import ReleaseLedger
    from xpushare.plugins import VendorHandle

log = logging.getLogger(__name__)

#: The longest lifetime a scheduler gives a handoff (its ``bind.handoff_ttl_s`` is at most
#: 120 s): a handoff claiming more was written by a skewed clock or by hand, and is read as
#: if it had this lifetime from its start.
MAX_HANDOFF_TTL_S = 120.0

#: Time kept back from the vendor's allocate call for answering kubelet after it.
VENDOR_MARGIN_S = 0.2


class Status(Enum):
    """What kind of failure an Allocate error is; the device plugin maps it to a gRPC code."""

    INVALID = "invalid-argument"  # ids that are not ours
    PRECONDITION = "failed-precondition"  # no pod, no assignment, mismatch
    UNAVAILABLE = "unavailable"  # vendor library stuck, API server down
    DEADLINE = "deadline-exceeded"
    INTERNAL = "internal"  # a vendor plugin bug


class AllocateError(XpushareError):
    """Allocate (or GetPreferredAllocation) cannot be answered; the message is for kubelet's
    event on the pod, so it names the node, the pod and the devices, and what to do."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Progress:
    """Which containers of one pod the agent has served, per vendor."""

    pod: PodRef
    served: dict[str, set[int]] = field(default_factory=dict)
    touched: float = 0.0


@dataclass(frozen=True)
class _Pending:
    """The pod being admitted and its assignment."""

    pod: PodRef
    assignment: PodAssignment
    via_handoff: bool
    #: The pod's annotations as read, for the vendor's per-pod settings (e.g. a QoS policy).
    annotations: Mapping[str, str] = field(default_factory=dict)


def _containers(assignment: PodAssignment, vendor: str) -> list[ContainerAssignment]:
    # kubelet admits init containers first, then the others, each in spec order.
    mine = [c for c in assignment.containers if c.vendor == vendor]
    return [c for c in mine if c.init] + [c for c in mine if not c.init]


def _pod_ref(pod: JsonObject) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
    )


def _annotations(pod: JsonObject) -> dict[str, str]:
    # The API server validates annotations as strings (256 KiB in all); anything else is
    # not an annotation a vendor could mean, and is left out rather than failing the pod.
    raw = (pod.get("metadata") or {}).get("annotations") or {}
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def _key(pod: PodRef) -> str:
    return pod.uid or str(pod)


class Allocator:
    """Serves Allocate and GetPreferredAllocation for every vendor of the node."""

    #: Progress of pods not touched for this long is forgotten (kubelet admitted them long
    #: ago, or they went away): ten minutes is far past any admission.
    forget_after_s = 600.0

    def __init__(
        self,
        *,
        kube: NodeKube,
        vendors: Mapping[str, VendorHandle],
        devices: Mapping[str, VendorDevices],
        deadline_s: float,
        clock: Callable[[], float] = time.time,
        ledger: ReleaseLedger | None = None,
        on_allocated: Callable[[str], None] = lambda key: None,
    ) -> None:
        self.kube = kube
        self.ledger = ledger
        self._on_allocated = on_allocated
        self.node = kube.node_name
        self._vendors = vendors
        self._devices = devices
        self.deadline_s = deadline_s
        self._clock = clock
        self._lock = asyncio.Lock()
        self._progress: dict[str, _Progress] = {}
        # Per vendor, the ids kubelet forced into its last GetPreferredAllocation.
        self._forced: dict[str, set[str]] = {}

    # -- Allocate ------------------------------------------------------------------------------

    async def allocate(
        self, vendor: str, resource: str, kubelet_ids: Sequence[str]
    ) -> ContainerAllocation:
        """One container's allocation of *vendor*'s devices named by *kubelet_ids*."""
        what = f"Allocate of {resource} {summarize(sorted(kubelet_ids))} on node {self.node}"
        deadline = asyncio.get_running_loop().time() + self.deadline_s
        try:
            async with asyncio.timeout_at(deadline):
                async with self._lock:
                    return await self._allocate(vendor, resource, kubelet_ids, what, deadline)
        except TimeoutError:
            raise AllocateError(
                Status.DEADLINE,
                f"{what}: no answer within {self.deadline_s:g} s (the API server or the "
                f"vendor {vendor!r} library is slow or hung); kubelet fails the pod, delete "
                "it to retry, and check the node agent's log and /readyz",
            ) from None

    async def _allocate(
        self, vendor: str, resource: str, kubelet_ids: Sequence[str], what: str, deadline: float
    ) -> ContainerAllocation:
        physical = self._physical(vendor, kubelet_ids, what)
        pending = await self._pending(vendor, what, physical)
        pod = pending.pod
        index, container = self._match(vendor, pending, kubelet_ids, physical, what)
        handle = self._vendors[vendor]
        view = self._devices[vendor].view
        inventory: list[Device] = []
        for piece in container.devices:
            device = view.device(piece.device_id)
            if device is None:
                raise AllocateError(
                    Status.PRECONDITION,
                    f"{what}: pod {pod} was assigned device {piece.device_id!r}, which this "
                    f"node's {vendor} inventory does not have; the scheduler's view of the "
                    "node is stale: delete the pod so it is placed again",
                )
            inventory.append(device)
        request = AllocateRequest(
            pod=pod,
            container=container.container,
            node=self.node,
            resource_name=resource,
            slices=container.devices,
            devices=tuple(inventory),
            pod_annotations=dict(pending.annotations),
        )
        # The vendor's own timeout ends a little before Allocate's, so a hung library is
        # reported as such (and marks its thread stuck) rather than as a plain deadline.
        noted = await self._note(handle, pod, vendor, container, what)
        remaining = deadline - asyncio.get_running_loop().time()
        timeout = max(0.05, remaining - VENDOR_MARGIN_S)
        try:
            result = await handle.aallocate(request, timeout_s=timeout)
        except (NativeCallTimeout, LibraryThreadStuck) as exc:
            raise AllocateError(Status.UNAVAILABLE, f"{what} for pod {pod}: {exc}") from exc
        except VendorUnavailable as exc:
            raise AllocateError(Status.UNAVAILABLE, f"{what} for pod {pod}: {exc}") from exc
        except (PluginError, NativeError) as exc:
            raise AllocateError(
                Status.INTERNAL,
                f"{what} for pod {pod} container {container.container!r}: {exc}",
            ) from exc
        if noted is not None and self.ledger is not None:
            await self._keep_record(pod, vendor, noted, result, what)
        progress = self._progress.setdefault(_key(pod), _Progress(pod))
        progress.served.setdefault(vendor, set()).add(index)
        progress.touched = self._clock()
        log.info(
            "allocated %s %s to pod %s container %s",
            vendor,
            [p.device_id for p in container.devices],
            pod,
            container.container,
        )
        self._forget_old()
        return result

    async def _note(
        self,
        handle: VendorHandle,
        pod: PodRef,
        vendor: str,
        container: ContainerAssignment,
        what: str,
    ) -> AllocatedContainer | None:
        """Write the container to the release ledger before its vendor may create anything.

        Only for vendors that release (the others create nothing to free). A ledger that
        cannot take it refuses the Allocate: nothing is created that could not be freed.
        """
        if self.ledger is None or not handle.implements("xpushare_release"):
            return None
        noted = AllocatedContainer(
            container=container.container, init=container.init, slices=container.devices
        )
        try:
            await self.ledger.begin(pod, vendor, noted)
        except (LedgerError, OSError) as exc:
            raise AllocateError(
                Status.UNAVAILABLE,
                f"{what} for pod {pod}: cannot remember it for release: {exc}. The node agent "
                f"needs a writable state directory ({self.ledger.directory})",
            ) from exc
        self._on_allocated(pod_key(pod))
        return noted

    async def _keep_record(
        self,
        pod: PodRef,
        vendor: str,
        noted: AllocatedContainer,
        result: ContainerAllocation,
        what: str,
    ) -> None:
        assert self.ledger is not None
        try:
            await self.ledger.complete(pod, vendor, noted, result.record)
        except OSError as exc:
            # The container is served; its entry keeps a null record, and release then finds
            # what was created by the pod's uid and the container's name.
            log.error("%s for pod %s: cannot keep the vendor's record: %s", what, pod, exc)

    def _physical(self, vendor: str, kubelet_ids: Sequence[str], what: str) -> list[str]:
        physical: list[str] = []
        for kid in kubelet_ids:
            device = physical_id(kid)
            if device is None:
                raise AllocateError(
                    Status.INVALID,
                    f"{what}: {kid!r} is not an xpushare device id (<device>::<share>); another "
                    "device plugin may have registered the same resource name",
                )
            if not self._devices[vendor].advertises(kid):
                raise AllocateError(
                    Status.INVALID,
                    f"{what}: {kid!r} is not a device this {vendor} plugin advertised; another "
                    "device plugin may have registered the same resource name, or kubelet's "
                    "checkpoint names a device of an older node layout",
                )
            if device in physical:
                raise AllocateError(
                    Status.PRECONDITION,
                    f"{what}: two shares of device {device!r} in one container; a container "
                    "takes one share per device: lower the container's device count",
                )
            physical.append(device)
        return physical

    def _served(self, pod: PodRef, vendor: str) -> set[int]:
        progress = self._progress.get(_key(pod))
        return set() if progress is None else progress.served.get(vendor, set())

    def _match(
        self,
        vendor: str,
        pending: _Pending,
        kubelet_ids: Sequence[str],
        physical: Sequence[str],
        what: str,
    ) -> tuple[int, ContainerAssignment]:
        containers = _containers(pending.assignment, vendor)
        served = self._served(pending.pod, vendor)
        waiting = [(i, c) for i, c in enumerate(containers) if i not in served]
        if not waiting:
            raise AllocateError(
                Status.PRECONDITION,
                f"{what}: pod {pending.pod} has no container of vendor {vendor!r} left to "
                "serve (all were allocated); kubelet is admitting a pod the scheduler did not "
                "place through xpushare: give it schedulerName xpushare, or check that only "
                "one device plugin serves this resource",
            )
        wanted = set(physical)
        for i, container in waiting:
            if {d.device_id for d in container.devices} == wanted:
                return i, container
        # kubelet hands an app container the shares its pod's init containers released
        # (must_include of GetPreferredAllocation) whatever the plugin prefers. Those ids
        # only stand for "one share" in kubelet's books; the container still gets its
        # assigned devices, provided every id kubelet chose freely is one of them.
        forced = self._forced.get(vendor, set())
        free = {physical_id(k) for k in kubelet_ids if k not in forced}
        if forced & set(kubelet_ids):
            for i, container in waiting:
                devices = {d.device_id for d in container.devices}
                if len(devices) == len(physical) and free <= devices:
                    return i, container
        expected = "; ".join(
            f"{c.container}: {sorted(d.device_id for d in c.devices)}" for _, c in waiting
        )
        raise AllocateError(
            Status.PRECONDITION,
            f"{what}: kubelet picked devices {summarize(sorted(wanted))} for pod "
            f"{pending.pod}, but its assignment gives {expected}. kubelet did not follow "
            "GetPreferredAllocation (another plugin or a stale checkpoint holds those "
            "shares?); delete the pod so it is placed again",
        )

    # -- GetPreferredAllocation ---------------------------------------------------------------

    async def preferred(
        self,
        vendor: str,
        resource: str,
        available: Sequence[str],
        must_include: Sequence[str],
        size: int,
    ) -> list[str]:
        """The ids kubelet should pick: one share of each device the pending container got.

        Without a pending pod (or on any error finding it) the vendor's own preference
        answers, so GetPreferredAllocation never fails a pod on its own.
        """
        what = f"GetPreferredAllocation of {resource} on node {self.node}"
        try:
            async with asyncio.timeout(self.deadline_s / 2):
                async with self._lock:
                    picked = await self._steer(vendor, available, must_include, size, what)
        except (AllocateError, TimeoutError) as exc:
            log.info("%s: no assignment to steer by (%s); asking the vendor", what, exc)
            picked = None
        if picked is not None:
            return picked
        handle = self._vendors[vendor]
        try:
            return await handle.apreferred_allocation(available, must_include, size)
        except (XpushareError, ValueError) as exc:
            log.warning("%s: vendor preference failed: %s", what, exc)
            chosen = list(must_include)
            chosen += [d for d in available if d not in chosen][: max(0, size - len(chosen))]
            return chosen

    async def _steer(
        self,
        vendor: str,
        available: Sequence[str],
        must_include: Sequence[str],
        size: int,
        what: str,
    ) -> list[str] | None:
        pending = await self._pending(vendor, what, None)
        served = self._served(pending.pod, vendor)
        self._forced[vendor] = set(must_include)
        for i, container in enumerate(_containers(pending.assignment, vendor)):
            devices = [d.device_id for d in container.devices]
            if i in served or len(devices) != size:
                continue
            # kubelet insists on must_include (shares released by init containers); the
            # rest are one share of each assigned device not already covered by those.
            picked = list(must_include)
            covered = {physical_id(m) for m in picked}
            for device in devices:
                if len(picked) >= size:
                    break
                if device in covered:
                    continue
                replicas = sorted(
                    (a for a in available if physical_id(a) == device and a not in picked),
                    key=_share_number,
                )
                if replicas:
                    picked.append(replicas[0])
                    covered.add(device)
            if len(picked) == size:
                return picked
            return None
        return None

    # -- finding the pod -----------------------------------------------------------------------

    async def _pending(self, vendor: str, what: str, physical: Sequence[str] | None) -> _Pending:
        lease = await self._read(self.kube.get_handoff(), what, "read the node's handoff")
        annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(HANDOFF_KEY)
        if lease is not None and raw is not None:
            node_term = parse_term(annotations.get(TERM_KEY))
            pending = await self._from_handoff(raw, vendor, what, node_term)
            if pending is not None:
                return pending
        return await self._from_listing(vendor, what, physical)

    async def _from_handoff(
        self, raw: str, vendor: str, what: str, node_term: int | None = None
    ) -> _Pending | None:
        try:
            handoff = decode_handoff(raw, node=self.node)
        except CodecError as exc:
            log.warning("%s: ignoring the node's handoff: %s", what, exc)
            return None
        if node_term is not None and handoff.term < node_term:
            # Written by a scheduler replica that has been deposed since (docs/scheduler.md,
            # fencing): its pod cannot have been bound by it, so it is not the one served.
            log.warning(
                "%s: ignoring the handoff of pod %s: written under scheduler term %d, the "
                "handoff Lease carries term %d",
                what,
                handoff.pod,
                handoff.term,
                node_term,
            )
            return None
        now = self._clock()
        if now >= min(handoff.expires, handoff.since + MAX_HANDOFF_TTL_S) or (
            handoff.since > now + MAX_HANDOFF_TTL_S
        ):
            log.info("%s: the handoff of pod %s has expired; looking for pods", what, handoff.pod)
            return None
        if vendor not in handoff.vendors or vendor in handoff.allocated:
            return None
        pod = await self._read(
            self.kube.get_pod(handoff.pod.namespace, handoff.pod.name), what, "read the pod"
        )
        if pod is None:
            log.info("%s: the handoff names pod %s, which is gone", what, handoff.pod)
            return None
        ref = _pod_ref(pod)
        if handoff.pod.uid and ref.uid and handoff.pod.uid != ref.uid:
            log.info("%s: pod %s was re-created since the handoff; looking for pods", what, ref)
            return None
        if _admitted(pod):
            # kubelet admitted it before (its status has a startTime): every Allocate of it
            # is behind it, and this one is another pod's. The scheduler replaces the
            # handoff at its next bind here; until then it names a pod that was served.
            log.info("%s: the handoff's pod %s was admitted already; looking for pods", what, ref)
            return None
        assignment = self._assignment(pod, ref, what)
        if self._vendor_done(ref, assignment, vendor):
            log.info("%s: the handoff's pod %s was served already; looking for pods", what, ref)
            return None
        return _Pending(ref, assignment, via_handoff=True, annotations=_annotations(pod))

    async def _from_listing(
        self, vendor: str, what: str, physical: Sequence[str] | None
    ) -> _Pending:
        pods = await self._read(self.kube.list_node_pods(), what, "list the node's pods")
        candidates: list[tuple[str, _Pending]] = []
        for pod in pods:
            meta = pod.get("metadata") or {}
            if (pod.get("status") or {}).get("phase") != "Pending" or meta.get("deletionTimestamp"):
                continue
            if _admitted(pod):
                continue  # kubelet admitted it already: its Allocates are behind it
            if ASSIGNMENT_KEY not in (meta.get("annotations") or {}):
                continue
            ref = _pod_ref(pod)
            try:
                assignment = self._assignment(pod, ref, what)
            except AllocateError as exc:
                log.warning("%s: skipping pod %s: %s", what, ref, exc)
                continue
            containers = _containers(assignment, vendor)
            served = self._served(ref, vendor)
            waiting = [c for i, c in enumerate(containers) if i not in served]
            if not waiting:
                continue
            if physical is not None and not any(
                {d.device_id for d in c.devices} == set(physical) for c in waiting
            ):
                continue
            pending = _Pending(ref, assignment, False, annotations=_annotations(pod))
            candidates.append((str(meta.get("creationTimestamp") or ""), pending))
        if not candidates:
            raise AllocateError(
                Status.PRECONDITION,
                f"{what}: no pod is waiting for these devices: the node has no current "
                f"{HANDOFF_KEY} and no Pending pod with an {ASSIGNMENT_KEY} for vendor "
                f"{vendor!r}{' on them' if physical else ''}. Pods asking for shared devices "
                "must be scheduled by the xpushare scheduler (schedulerName); delete the pod "
                "so it is placed again",
            )
        candidates.sort(key=lambda c: c[0])
        return candidates[0][1]

    def _assignment(self, pod: JsonObject, ref: PodRef, what: str) -> PodAssignment:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(ASSIGNMENT_KEY)
        if raw is None:
            raise AllocateError(
                Status.PRECONDITION,
                f"{what}: pod {ref} has no {ASSIGNMENT_KEY} annotation: it was not bound by "
                "the xpushare scheduler; delete it so it is placed again",
            )
        try:
            assignment = decode_assignment(raw, pod=str(ref))
        except CodecError as exc:
            raise AllocateError(Status.PRECONDITION, f"{what}: {exc}") from exc
        if assignment.node != self.node:
            raise AllocateError(
                Status.PRECONDITION,
                f"{what}: pod {ref} is assigned devices on node {assignment.node!r}, not this "
                f"node {self.node!r}; delete the pod so it is placed again",
            )
        return assignment

    async def _read(self, call: Any, what: str, doing: str) -> Any:
        try:
            return await call
        except KubeError as exc:
            raise AllocateError(Status.UNAVAILABLE, f"{what}: cannot {doing}: {exc}") from exc

    # -- what was served ---------------------------------------------------------------------

    def _vendor_done(self, pod: PodRef, assignment: PodAssignment, vendor: str) -> bool:
        return len(self._served(pod, vendor)) >= len(_containers(assignment, vendor))

    def _forget_old(self) -> None:
        limit = self._clock() - self.forget_after_s
        for key in [k for k, p in self._progress.items() if p.touched < limit]:
            del self._progress[key]


def _share_number(kubelet_id: str) -> int:
    return int(kubelet_id.rpartition("::")[2] or 0)


def _admitted(pod: JsonObject) -> bool:
    """Whether kubelet has admitted *pod* (the scheduler's ``objects.started`` reads the same
    fields): a ``status.startTime``, or a phase past Pending."""
    status = pod.get("status") or {}
    if not isinstance(status, dict):
        return False
    return bool(status.get("startTime")) or status.get("phase") not in (None, "", "Pending")

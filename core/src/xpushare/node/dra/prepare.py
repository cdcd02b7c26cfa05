"""NodePrepareResources and NodeUnprepareResources of one vendor, without the gRPC.

Prepare turns an allocated ResourceClaim into CDI devices through the **same** vendor
``allocate`` hook as the device-plugin path (so NVIDIA claims get HAMi-core's limits):

1. the claim is read from the API server and checked (the UID kubelet named, an allocation,
   results of our driver in our pool naming devices of our slices, consumed capacity within
   the device);
2. the results are grouped by request; each request is one ``allocate`` call, whose
   ``request.pod`` is the **claim** (namespace, name, uid: what lives from prepare to
   unprepare, and what pods sharing the claim share) and whose container is the request's
   name; each result's consumed ``memory`` and ``cores`` become the slice's limits;
3. the vendor's envs, device nodes and mounts become one CDI device per request, in one
   CDI spec file per claim; the vendor's own CDI names are passed on as well.

A container that names the claim without a ``request`` is handed by kubelet the CDI names of
every device of the claim. Per-request CDI devices would then each set the same variables
(``NVIDIA_VISIBLE_DEVICES``, ``CUDA_DEVICE_MEMORY_LIMIT_0``) and mount the same container
path to different values. So when a pod the claim is reserved for has such a container and
the claim has several requests, the claim is prepared as one: a single ``allocate`` call over
every result (container name :data:`WHOLE_CLAIM`), one CDI device named by every device of
the answer. The container sees all the devices with their own limits (indexed ``_0``,
``_1``, ..., as the device-plugin path gives a container several devices). A container of
such a pod that names one request gets the same whole view: kubelet gives both containers
the CDI names of the request's devices, so the two views cannot differ.

Unprepare releases through ``xpushare_release`` with the records ``allocate`` returned, then
removes the CDI spec. Both are idempotent and checkpointed (node/dra/checkpoint.py).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from xpushare.errors import XpushareError
from xpushare.models import AllocatedContainer, AllocateRequest, DeviceSlice, PodRef, ReleaseRequest
from xpushare.native import NativeError
from xpushare.node.dra.checkpoint import (
    CDI_VERSION,
    CheckpointError,
    Checkpoints,
    ClaimCheckpoint,
    cdi_device,
    cdi_kind,
    container_edits,
    remove_cdi_spec,
    valid_uid,
    write_cdi_spec,
)
from xpushare.node.dra.slices import device_names, driver_name
from xpushare.node.kube import KubeError
from xpushare.scheduling.quantity import QuantityError, parse_quantity

if TYPE_CHECKING:
    from pathlib import Path

    from xpushare.models import ContainerAllocation, Device
    from xpushare.node.devices import VendorDevices
    from xpushare.node.kube import JsonObject
    from xpushare.plugins import VendorHandle

log = logging.getLogger(__name__)

#: Allocation results of one claim: the API allows 32 (resource/v1 AllocationResultsMaxSize).
MAX_RESULTS = 32

#: Longest share ID accepted (the API's are UUID-like, 36 characters).
MAX_SHARE_ID = 64

MIB = 1 << 20

#: The container name of the one ``allocate`` call of a claim prepared whole (see above).
#: A DNS label, as vendors name per-container directories by it; a request of the same name
#: cannot be confused with it, since a claim prepared whole has no other call.
WHOLE_CLAIM = "claim"

_REQUEST = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$")


class ClaimKube(Protocol):
    node_name: str

    async def get_resource_claim(self, namespace: str, name: str) -> JsonObject | None: ...

    async def get_pod(self, namespace: str, name: str) -> JsonObject | None: ...


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"


class PrepareError(XpushareError):
    """One claim cannot be prepared or unprepared; the message goes to the pod's events."""


@dataclass(frozen=True)
class _Result:
    request: str
    device: Device
    device_name: str
    share_id: str | None
    memory_mib: int
    compute_percent: int
    whole: bool


class ClaimPreparer:
    """Prepares and unprepares one vendor's claims (see the module docstring)."""

    def __init__(
        self,
        *,
        kube: ClaimKube,
        vendor: str,
        handle: VendorHandle,
        devices: VendorDevices,
        checkpoints: Checkpoints,
        cdi_dir: Path,
        deadline_s: float,
    ) -> None:
        self.kube = kube
        self.vendor = vendor
        self.driver = driver_name(vendor)
        self.node = kube.node_name
        self._handle = handle
        self._devices = devices
        self.checkpoints = checkpoints
        self.cdi_dir = cdi_dir
        self.deadline_s = deadline_s
        # One claim at a time: the vendor's calls are serialised on its thread anyway, and a
        # claim prepared twice at once would race on its checkpoint.
        self._lock = asyncio.Lock()

    @property
    def devices(self) -> VendorDevices:
        """The vendor's live devices (their health is what the DRA health stream reports)."""
        return self._devices

    # -- prepare -----------------------------------------------------------------------------

    async def prepare(self, ref: ClaimRef) -> list[dict[str, Any]]:
        """The devices kubelet gets for *ref*; :class:`PrepareError` when it cannot."""
        what = f"prepare of ResourceClaim {ref} for driver {self.driver} on node {self.node}"
        if not valid_uid(ref.uid):
            raise PrepareError(f"{what}: the claim UID {ref.uid[:80]!r} is not a UID")
        async with self._lock:
            done = self.checkpoints.get(ref.uid)
            if done is not None and done.state == "prepared":
                if done.cdi_spec is not None and not self._cdi_present(ref.uid):
                    await asyncio.to_thread(
                        write_cdi_spec, self.cdi_dir, self.vendor, ref.uid, done.cdi_spec
                    )
                return done.devices
            if done is not None:
                # Cut short earlier: free what may exist before preparing it again.
                await self._release(done, what)
            claim = await self._read(ref, what)
            results = self._results(claim, ref, what)
            whole = len({r.request for r in results}) > 1 and await self._taken_whole(
                claim, ref, what
            )
            return await self._prepare(ref, claim, results, what, whole=whole)

    async def _taken_whole(self, claim: JsonObject, ref: ClaimRef, what: str) -> bool:
        """Whether a container of a pod the claim is reserved for names it without a request."""
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        for consumer in reserved if isinstance(reserved, list) else []:
            if not isinstance(consumer, dict) or consumer.get("resource") != "pods":
                continue
            name = consumer.get("name")
            if not isinstance(name, str) or not name:
                continue
            try:
                pod = await self.kube.get_pod(ref.namespace, name)
            except KubeError as exc:
                raise PrepareError(
                    f"{what}: cannot read pod {ref.namespace}/{name}, which the claim is "
                    f"reserved for, to see how its containers use the claim: {exc}"
                ) from exc
            if pod is not None and _names_claim_whole(pod, ref.name):
                return True
        return False

    def _cdi_present(self, uid: str) -> bool:
        from xpushare.node.dra.checkpoint import cdi_file_name

        return (self.cdi_dir / cdi_file_name(self.vendor, uid)).is_file()

    async def _read(self, ref: ClaimRef, what: str) -> JsonObject:
        try:
            claim = await self.kube.get_resource_claim(ref.namespace, ref.name)
        except KubeError as exc:
            raise PrepareError(f"{what}: cannot read the claim: {exc}") from exc
        if claim is None:
            raise PrepareError(f"{what}: the claim does not exist (deleted meanwhile?)")
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise PrepareError(
                f"{what}: the claim's UID is {str(uid)[:64]!r}, kubelet named {ref.uid!r}: it "
                "was re-created; kubelet retries with the new one"
            )
        return claim

    def _results(self, claim: JsonObject, ref: ClaimRef, what: str) -> list[_Result]:
        allocation = (claim.get("status") or {}).get("allocation")
        if not isinstance(allocation, dict):
            raise PrepareError(f"{what}: the claim is not allocated")
        raw = (allocation.get("devices") or {}).get("results") or []
        if not isinstance(raw, list) or len(raw) > MAX_RESULTS:
            raise PrepareError(
                f"{what}: allocation results must be a list of at most {MAX_RESULTS}"
            )
        names = device_names(self._devices.view.devices)
        results: list[_Result] = []
        for i, entry in enumerate(raw):
            if not isinstance(entry, dict) or entry.get("driver") != self.driver:
                continue
            field = f"status.allocation.devices.results[{i}]"
            request = entry.get("request")
            if not isinstance(request, str) or not _REQUEST.match(request):
                raise PrepareError(f"{what}: {field}.request is not a request name")
            if entry.get("pool") != self.node:
                raise PrepareError(
                    f"{what}: {field}.pool is {str(entry.get('pool'))[:64]!r}, not this node's "
                    f"pool {self.node!r}: the claim was allocated for another node"
                )
            name = entry.get("device")
            device = names.get(name) if isinstance(name, str) else None
            if device is None:
                raise PrepareError(
                    f"{what}: {field}.device {str(name)[:64]!r} is not a {self.vendor} device of "
                    "this node any more (re-detected away?); delete the pod so its claim is "
                    "allocated again"
                )
            share = entry.get("shareID")
            if share is not None and (not isinstance(share, str) or len(share) > MAX_SHARE_ID):
                raise PrepareError(f"{what}: {field}.shareID is not a share ID")
            memory, cores, whole = self._consumed(
                entry.get("consumedCapacity"), device, field, what
            )
            results.append(_Result(request, device, str(name), share, memory, cores, whole))
        return results

    def _consumed(self, raw: Any, device: Device, field: str, what: str) -> tuple[int, int, bool]:
        """(memory MiB, compute percent, whole device) of one result."""
        if raw is None:
            return device.memory_mib, 100, True
        if not isinstance(raw, dict):
            raise PrepareError(f"{what}: {field}.consumedCapacity is not a map")

        def value(key: str, default: Decimal) -> Decimal:
            if key not in raw:
                return default
            try:
                return parse_quantity(raw[key])
            except QuantityError as exc:
                raise PrepareError(f"{what}: {field}.consumedCapacity.{key} {exc}") from exc

        memory_bytes = value("memory", Decimal(device.memory_mib) * MIB)
        cores = value("cores", Decimal(0))
        memory = int(memory_bytes // MIB)
        if not 0 < memory <= device.memory_mib:
            raise PrepareError(
                f"{what}: {field}.consumedCapacity.memory is {memory} MiB; device "
                f"{device.id} has {device.memory_mib} MiB"
            )
        if not 0 <= cores <= 100 or cores != int(cores):
            raise PrepareError(
                f"{what}: {field}.consumedCapacity.cores must be 0..100, got {cores}"
            )
        return memory, int(cores), memory == device.memory_mib and int(cores) in (0, 100)

    async def _prepare(
        self, ref: ClaimRef, claim: JsonObject, results: list[_Result], what: str, *, whole: bool
    ) -> list[dict[str, Any]]:
        owner = PodRef(namespace=ref.namespace, name=ref.name, uid=ref.uid)
        by_request: dict[str, list[_Result]] = {}
        for r in results:
            by_request.setdefault(WHOLE_CLAIM if whole else r.request, []).append(r)
        requests = [
            AllocatedContainer(
                container=request,
                slices=tuple(
                    DeviceSlice(
                        device_id=r.device.id,
                        index=r.device.index,
                        memory_mib=r.memory_mib,
                        compute_percent=r.compute_percent,
                        exclusive=r.whole,
                    )
                    for r in group
                ),
            )
            for request, group in by_request.items()
        ]
        entry = ClaimCheckpoint(claim=owner, state="preparing", requests=requests, devices=[])
        await self._put(entry, what)
        annotations = _annotations(claim)
        kind = cdi_kind(self.vendor)
        cdi_devices: list[dict[str, Any]] = []
        answer: list[dict[str, Any]] = []
        for index, (request, group) in enumerate(by_request.items()):
            allocation = await self._allocate(owner, request, group, annotations, what)
            requests[index] = requests[index].model_copy(update={"record": dict(allocation.record)})
            entry.requests = list(requests)
            await self._put(entry, what)  # the record, before anything else can go wrong
            cdi_name = f"{ref.uid}-{request.replace('/', '-')}"
            cdi_devices.append(
                cdi_device(
                    cdi_name,
                    container_edits(
                        dict(allocation.envs),
                        [
                            (d.container_path, d.host_path, d.permissions)
                            for d in allocation.devices
                        ],
                        [(m.host_path, m.container_path, m.read_only) for m in allocation.mounts],
                    ),
                    dict(allocation.annotations),
                )
            )
            ids = [f"{kind}={cdi_name}", *allocation.cdi_devices]
            for r in group:
                device: dict[str, Any] = {
                    "request_names": [r.request],
                    "pool_name": self.node,
                    "device_name": r.device_name,
                    "cdi_device_ids": ids,
                }
                if r.share_id is not None:
                    device["share_id"] = r.share_id
                answer.append(device)
        spec = {"cdiVersion": CDI_VERSION, "kind": kind, "devices": cdi_devices}
        try:
            await asyncio.to_thread(write_cdi_spec, self.cdi_dir, self.vendor, ref.uid, spec)
        except OSError as exc:
            raise PrepareError(
                f"{what}: cannot write the CDI spec under {self.cdi_dir}: {exc}; the node agent "
                "needs the container runtime's CDI directory mounted writable"
            ) from exc
        entry.state, entry.devices, entry.cdi_spec = "prepared", answer, spec
        await self._put(entry, what)
        log.info(
            "prepared claim %s: %s",
            ref,
            ", ".join(
                f"{r.request}: {r.device.id} {r.memory_mib} MiB {r.compute_percent}%"
                for r in results
            ),
        )
        return answer

    async def _allocate(
        self,
        owner: PodRef,
        request: str,
        group: list[_Result],
        annotations: dict[str, str],
        what: str,
    ) -> ContainerAllocation:
        call = AllocateRequest(
            pod=owner,
            container=request,
            node=self.node,
            resource_name=self.driver,
            slices=tuple(
                DeviceSlice(
                    device_id=r.device.id,
                    index=r.device.index,
                    memory_mib=r.memory_mib,
                    compute_percent=r.compute_percent,
                    exclusive=r.whole,
                )
                for r in group
            ),
            devices=tuple(r.device for r in group),
            pod_annotations=annotations,
        )
        try:
            return await self._handle.aallocate(call, timeout_s=self.deadline_s)
        except (XpushareError, NativeError) as exc:
            devices = ", ".join(r.device.id for r in group)
            raise PrepareError(
                f"{what}: vendor {self.vendor} could not prepare request {request!r} on "
                f"{devices}: {exc}; kubelet retries, see the node agent's log"
            ) from exc

    async def _put(self, entry: ClaimCheckpoint, what: str) -> None:
        try:
            await asyncio.to_thread(self.checkpoints.put, entry)
        except (CheckpointError, OSError) as exc:
            raise PrepareError(
                f"{what}: cannot checkpoint the claim: {exc} (directory "
                f"{self.checkpoints.directory})"
            ) from exc

    # -- unprepare ---------------------------------------------------------------------------

    async def unprepare(self, ref: ClaimRef) -> None:
        """Release *ref*; a claim this driver never prepared (or already released) is fine."""
        what = f"unprepare of ResourceClaim {ref} for driver {self.driver} on node {self.node}"
        if not valid_uid(ref.uid):
            raise PrepareError(f"{what}: the claim UID {ref.uid[:80]!r} is not a UID")
        async with self._lock:
            entry = self.checkpoints.get(ref.uid)
            if entry is not None:
                await self._release(entry, what)
            await asyncio.to_thread(remove_cdi_spec, self.cdi_dir, self.vendor, ref.uid)

    async def _release(self, entry: ClaimCheckpoint, what: str) -> None:
        if self._handle.implements("xpushare_release") and entry.requests:
            request = ReleaseRequest(
                pod=entry.claim, node=self.node, containers=tuple(entry.requests)
            )
            try:
                await self._handle.arelease(request, timeout_s=self.deadline_s)
            except (XpushareError, NativeError) as exc:
                raise PrepareError(
                    f"{what}: vendor {self.vendor} could not release it: {exc}; kubelet "
                    "retries, and the checkpoint keeps what to free"
                ) from exc
        await asyncio.to_thread(remove_cdi_spec, self.cdi_dir, self.vendor, entry.claim.uid)
        await asyncio.to_thread(self.checkpoints.remove, entry.claim.uid)


def _names_claim_whole(pod: JsonObject, claim_name: str) -> bool:
    """Whether a container of *pod* takes ResourceClaim *claim_name* without a request.

    A pod names its claims by its own names (``spec.resourceClaims[].name``): the claim's
    name is there for a claim named directly, in ``status.resourceClaimStatuses`` for one
    made from a template.
    """
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    names = {
        entry.get("name")
        for source in (spec.get("resourceClaims"), status.get("resourceClaimStatuses"))
        for entry in (source if isinstance(source, list) else [])
        if isinstance(entry, dict) and entry.get("resourceClaimName") == claim_name
    }
    names.discard(None)
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        for container in containers if isinstance(containers, list) else []:
            resources = (container.get("resources") or {}) if isinstance(container, dict) else {}
            claims = resources.get("claims") if isinstance(resources, dict) else None
            for entry in claims if isinstance(claims, list) else []:
                if (
                    isinstance(entry, dict)
                    and entry.get("name") in names
                    and not entry.get("request")
                ):
                    return True
    return False


def _annotations(claim: JsonObject) -> dict[str, str]:
    raw = (claim.get("metadata") or {}).get("annotations") or {}
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}

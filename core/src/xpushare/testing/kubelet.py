"""A fake kubelet that speaks the real device-plugin gRPC API over unix sockets.

Why: no kubelet can run on a developer's or CI machine, and testing a device plugin by
calling its methods directly misses exactly what breaks in clusters: registration order
(kubelet dials the plugin back from inside Register), ListAndWatch as the only health
channel, kubelet restarts that wipe the socket directory, and kubelet picking device ids in
no particular order. :class:`FakeKubelet` reproduces those behaviours of the upstream
device manager (research/k8s-apis.md §1.4 and §8.3) in a temporary directory that stands in
for ``/var/lib/kubelet/device-plugins``::

    async with FakeKubelet(plugin_dir) as kubelet:
        ...  # start the device plugin under test with plugin_dir as its directory
        await kubelet.wait_until(lambda: kubelet.allocatable("acme.com/gpu") == 8)
        result = await kubelet.admit_pod("uid-1", [ContainerSpec("main", {"acme.com/gpu": 1})])
        result["main"].envs  # what the container would get
        await kubelet.restart()  # wipes the sockets: the plugin must register again

With ``pod_resources_socket`` it also serves kubelet's PodResources ``List`` there (the pods
admitted and not removed, by namespace and name, research/k8s-apis.md §2), so a release
that waits for kubelet to let go of a pod can be tested.

It runs on the caller's event loop (``grpc.aio``), so the plugin under test can share it.
Keep *plugin_dir* short: a unix socket path has at most 107 bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import stat
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from xpushare.node.deviceplugin.proto import pb, pb_grpc
from xpushare.node.podresources import pr, pr_grpc

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
    from types import TracebackType

__all__ = [
    "AdmissionError",
    "ContainerResult",
    "ContainerSpec",
    "FakeKubelet",
    "Registration",
]

#: kubelet's constants (research/k8s-apis.md §0 and §1.3).
KUBELET_SOCKET = "kubelet.sock"
SUPPORTED_VERSIONS = ("v1beta1",)
CHECKPOINT_FILE = "kubelet_internal_checkpoint"
HEALTHY = "Healthy"
#: kubelet dials a registering plugin back with this timeout (client.go, §0).
DIAL_TIMEOUT_S = 10.0
#: How long kubelet keeps a disconnected plugin's resource (endpointStopGracePeriod, §0).
GRACE_PERIOD_S = 300.0
#: PreStartContainer's deadline (KubeletPreStartContainerRPCTimeoutInSecs, §0).
PRE_START_TIMEOUT_S = 30.0

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def valid_extended_resource_name(name: str) -> bool:
    """kubelet's rule for a device plugin's resource name (research/k8s-apis.md §1.4)."""
    prefix, sep, rest = name.partition("/")
    if not sep or "/" in rest or not _NAME.match(rest):
        return False
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return False
    # kubelet also checks "requests.<name>" as a qualified name: the prefix must stay a
    # DNS subdomain of at most 253 characters with "requests." in front.
    return len("requests." + prefix) <= 253 and bool(_SUBDOMAIN.match(prefix))


class AdmissionError(Exception):
    """kubelet refused a pod at admission (phase Failed, reason UnexpectedAdmissionError)."""

    reason = "UnexpectedAdmissionError"

    def __init__(self, pod_uid: str, message: str) -> None:
        super().__init__(message)
        self.pod_uid = pod_uid


@dataclass(frozen=True)
class ContainerSpec:
    """One container of a pod being admitted: its name and device-plugin resource counts."""

    name: str
    requests: Mapping[str, int]
    init: bool = False


@dataclass
class ContainerResult:
    """What kubelet hands the container runtime for one container (all resources merged)."""

    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)
    envs: dict[str, str] = field(default_factory=dict)
    mounts: dict[str, tuple[str, bool]] = field(default_factory=dict)
    device_specs: dict[str, tuple[str, str]] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)

    def merge(self, response: Any) -> None:
        # kubelet merges responses of all resources of a container; the first value wins
        # (pod_devices.go, research/k8s-apis.md §1.4 "Applying the response").
        for key, value in response.envs.items():
            self.envs.setdefault(key, value)
        for m in response.mounts:
            self.mounts.setdefault(m.container_path, (m.host_path, m.read_only))
        for d in response.devices:
            self.device_specs.setdefault(d.container_path, (d.host_path, d.permissions))
        for key, value in response.annotations.items():
            self.annotations.setdefault(key, value)
        self.cdi_devices.extend(c.name for c in response.cdi_devices)


@dataclass(frozen=True)
class Registration:
    """One Register call kubelet accepted."""

    resource: str
    endpoint: str
    version: str
    options: Any
    at: float  # time.monotonic()


@dataclass
class _Endpoint:
    resource: str
    endpoint: str
    channel: grpc.aio.Channel
    stub: Any
    options: Any
    devices: dict[str, str] = field(default_factory=dict)
    updates: int = 0
    stopped_at: float | None = None
    consumer: asyncio.Task[None] | None = None


@dataclass
class _Allocation:
    pod_uid: str
    container: str
    resource: str
    device_ids: list[str]
    init: bool


class FakeKubelet:
    """A kubelet device manager in miniature (see the module docstring)."""

    def __init__(
        self,
        plugin_dir: Path,
        *,
        dial_timeout_s: float = DIAL_TIMEOUT_S,
        grace_period_s: float = GRACE_PERIOD_S,
        seed: int | None = 0,
        pod_resources_socket: Path | None = None,
    ) -> None:
        self.plugin_dir = plugin_dir
        #: Where kubelet's PodResources API is served (``None``: not served, as on a kubelet
        #: without it); it lists the admitted pods not removed, by namespace and name.
        self.pod_resources_socket = pod_resources_socket
        self.pod_resources_calls = 0
        self.socket = plugin_dir / KUBELET_SOCKET
        self.dial_timeout_s = dial_timeout_s
        self.grace_period_s = grace_period_s
        self.registrations: list[Registration] = []
        self.restarts = 0
        self.started_at = 0.0
        #: Registrations to refuse (UNAVAILABLE) before accepting again, and how many were.
        self.refuse_registrations = 0
        self.refused = 0
        self.failed_pods: dict[str, str] = {}
        self._random = random.Random(seed)
        self._server: grpc.aio.Server | None = None
        self._endpoints: dict[str, _Endpoint] = {}
        self._allocations: list[_Allocation] = []
        self._names: dict[str, tuple[str, str]] = {}  # pod uid -> (namespace, name)
        self._pod_resources: grpc.aio.Server | None = None
        self._changed = asyncio.Event()

    # -- life cycle --------------------------------------------------------------------------

    async def __aenter__(self) -> FakeKubelet:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start as kubelet does: wipe the plugins' sockets, then serve Registration."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.wipe_sockets()
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server
        if self.pod_resources_socket is not None:
            lister = grpc.aio.server()
            pr_grpc.add_PodResourcesListerServicer_to_server(_PodResourcesLister(self), lister)
            lister.add_insecure_port(f"unix://{self.pod_resources_socket}")
            await lister.start()
            self._pod_resources = lister
        self.started_at = time.monotonic()
        self._notify()

    async def stop(self) -> None:
        """Stop serving and drop every plugin connection (sockets are left as they are)."""
        if self._server is not None:
            await self._server.stop(0)
            self._server = None
        if self._pod_resources is not None:
            await self._pod_resources.stop(0)
            self._pod_resources = None
        for endpoint in list(self._endpoints.values()):
            await self._disconnect(endpoint)
        self._notify()

    async def restart(self) -> None:
        """A kubelet restart: plugins lose their connection and their sockets, and must
        register again; until they do, their resources have no devices (the checkpoint
        keeps pods' allocations)."""
        await self.stop()
        for endpoint in self._endpoints.values():
            endpoint.devices.clear()
        self.restarts += 1
        await self.start()

    def wipe_sockets(self) -> list[str]:
        """Delete every unix socket in the directory, as kubelet does at start; the names."""
        removed = []
        for path in sorted(self.plugin_dir.iterdir()):
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISSOCK(mode) and path.name != CHECKPOINT_FILE:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                removed.append(path.name)
        return removed

    # -- what the node would report ------------------------------------------------------------

    def devices(self, resource: str) -> dict[str, str]:
        """Device id → health, as the plugin's last ListAndWatch message said."""
        endpoint = self._endpoints.get(resource)
        return dict(endpoint.devices) if endpoint else {}

    def registered(self, resource: str) -> bool:
        endpoint = self._endpoints.get(resource)
        return endpoint is not None and endpoint.stopped_at is None

    def registrations_of(self, resource: str) -> list[Registration]:
        return [r for r in self.registrations if r.resource == resource]

    def updates(self, resource: str) -> int:
        """ListAndWatch messages received from the current registration."""
        endpoint = self._endpoints.get(resource)
        return endpoint.updates if endpoint else 0

    def capacity(self, resource: str) -> int:
        """Healthy plus unhealthy devices; 0 after the grace period without a plugin."""
        endpoint = self._endpoints.get(resource)
        if endpoint is None:
            return 0
        if (
            endpoint.stopped_at is not None
            and time.monotonic() - endpoint.stopped_at > self.grace_period_s
        ):
            return 0
        return len(endpoint.devices)

    def allocatable(self, resource: str) -> int:
        """Healthy devices of a connected plugin (a disconnected one has none)."""
        endpoint = self._endpoints.get(resource)
        if endpoint is None or endpoint.stopped_at is not None:
            return 0
        return sum(1 for h in endpoint.devices.values() if h == HEALTHY)

    def allocated(self, pod_uid: str | None = None) -> dict[tuple[str, str, str], list[str]]:
        """(pod uid, container, resource) → device ids, for one pod or all."""
        return {
            (a.pod_uid, a.container, a.resource): list(a.device_ids)
            for a in self._allocations
            if pod_uid is None or a.pod_uid == pod_uid
        }

    async def wait_until(
        self, predicate: Callable[[], bool], timeout_s: float = 10.0, what: str = ""
    ) -> None:
        """Wait until *predicate()* holds; it is re-checked on every change kubelet sees."""

        async def wait() -> None:
            while not predicate():
                changed = self._changed
                await changed.wait()

        try:
            async with asyncio.timeout(timeout_s):
                await wait()
        except TimeoutError:
            raise TimeoutError(
                f"fake kubelet: {what or 'condition'} not reached within {timeout_s:g} s; "
                f"registrations={[(r.resource, r.endpoint) for r in self.registrations]}"
            ) from None

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- registration ----------------------------------------------------------------------------

    async def _register(self, request: Any, context: Any) -> Any:
        if self.refuse_registrations > 0:
            # A kubelet that has created its socket but is not ready to take plugins yet.
            self.refuse_registrations -= 1
            self.refused += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is still starting")
        if request.version not in SUPPORTED_VERSIONS:
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f'requested API version "{request.version}" is not supported by kubelet. '
                f'Supported version is ["{SUPPORTED_VERSIONS[0]}"]',
            )
        if not valid_extended_resource_name(request.resource_name):
            await context.abort(
                grpc.StatusCode.UNKNOWN, f'the ResourceName "{request.resource_name}" is invalid'
            )
        path = self.plugin_dir / request.endpoint
        channel = grpc.aio.insecure_channel(f"unix://{path}")
        stub = pb_grpc.DevicePluginStub(channel)
        try:
            async with asyncio.timeout(self.dial_timeout_s):
                await channel.channel_ready()
        except (TimeoutError, grpc.aio.AioRpcError) as exc:
            await channel.close()
            await context.abort(grpc.StatusCode.UNKNOWN, f"failed to dial device plugin: {exc!r}")
        try:
            options = await stub.GetDevicePluginOptions(pb.Empty(), timeout=self.dial_timeout_s)
        except grpc.aio.AioRpcError as exc:
            await channel.close()
            await context.abort(
                grpc.StatusCode.UNKNOWN, f"failed to get device plugin options: {exc.details()}"
            )
        old = self._endpoints.get(request.resource_name)
        if old is not None:  # a new registration replaces the endpoint held for the name
            await self._disconnect(old)
        endpoint = _Endpoint(request.resource_name, request.endpoint, channel, stub, options)
        self._endpoints[request.resource_name] = endpoint
        self.registrations.append(
            Registration(
                request.resource_name, request.endpoint, request.version, options, time.monotonic()
            )
        )
        # kubelet starts ListAndWatch once Register has returned.
        endpoint.consumer = asyncio.get_running_loop().create_task(self._consume(endpoint))
        self._notify()
        return pb.Empty()

    async def _consume(self, endpoint: _Endpoint) -> None:
        try:
            async for response in endpoint.stub.ListAndWatch(pb.Empty()):
                # Every message is the complete list (kubelet rebuilds its sets from it).
                endpoint.devices = {d.ID: d.health for d in response.devices}
                endpoint.updates += 1
                self._notify()
        except grpc.aio.AioRpcError:
            pass
        except asyncio.CancelledError:
            pass
        finally:
            # The stream ended: the plugin counts as disconnected and must register again.
            if endpoint.stopped_at is None:
                endpoint.stopped_at = time.monotonic()
            self._notify()

    async def _disconnect(self, endpoint: _Endpoint) -> None:
        if endpoint.stopped_at is None:
            endpoint.stopped_at = time.monotonic()
        task = endpoint.consumer
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await endpoint.channel.close()

    # -- calls into the plugin ---------------------------------------------------------------------

    def _endpoint(self, resource: str) -> _Endpoint:
        endpoint = self._endpoints.get(resource)
        if endpoint is None:
            raise AdmissionError("", f"cannot allocate unregistered device {resource}")
        if endpoint.stopped_at is not None:
            raise AdmissionError("", f"endpoint {endpoint.endpoint} has been stopped")
        return endpoint

    async def allocate(self, resource: str, device_ids: Sequence[str]) -> Any:
        """One Allocate call with one container request; the plugin's response."""
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=list(device_ids))]
        )
        return await self._endpoint(resource).stub.Allocate(request)

    async def get_preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        response = await self._endpoint(resource).stub.GetPreferredAllocation(request)
        return list(response.container_responses[0].deviceIDs)

    async def pre_start_container(self, resource: str, device_ids: Sequence[str]) -> None:
        endpoint = self._endpoint(resource)
        if endpoint.options.pre_start_required:
            await endpoint.stub.PreStartContainer(
                pb.PreStartContainerRequest(devices_ids=list(device_ids)),
                timeout=PRE_START_TIMEOUT_S,
            )

    # -- pod admission ---------------------------------------------------------------------------

    async def admit_pod(
        self,
        pod_uid: str,
        containers: Sequence[ContainerSpec],
        *,
        namespace: str = "default",
        name: str | None = None,
    ) -> dict[str, ContainerResult]:
        """Admit a pod as kubelet's device manager does (research/k8s-apis.md §1.4).

        Init containers first, then the others; for each (container, resource): reuse an
        earlier allocation, else pick devices (GetPreferredAllocation when the plugin asked
        for it, then a random fill) and call Allocate. On any error the pod fails with
        :class:`AdmissionError` and keeps no devices.
        """
        ordered = [c for c in containers if c.init] + [c for c in containers if not c.init]
        results: dict[str, ContainerResult] = {}
        self._names[pod_uid] = (namespace, name or pod_uid)
        try:
            for container in ordered:
                result = ContainerResult(container.name)
                for resource, count in container.requests.items():
                    ids = await self._devices_for(pod_uid, container, resource, count)
                    result.devices[resource] = ids
                    try:
                        response = await self.allocate(resource, ids)
                    except grpc.aio.AioRpcError as exc:
                        raise AdmissionError(
                            pod_uid, f"Allocate failed due to {exc.details()}, which is unexpected"
                        ) from exc
                    if not response.container_responses:
                        raise AdmissionError(
                            pod_uid,
                            "Allocate failed due to no containers return in allocation "
                            "response, which is unexpected",
                        )
                    result.merge(response.container_responses[0])
                results[container.name] = result
        except AdmissionError as exc:
            exc.pod_uid = pod_uid
            self.failed_pods[pod_uid] = str(exc)
            self.remove_pod(pod_uid)
            raise
        return results

    def remove_pod(self, pod_uid: str) -> None:
        """The pod is gone: its devices are free again, and PodResources no longer lists it."""
        self._allocations = [a for a in self._allocations if a.pod_uid != pod_uid]
        self._names.pop(pod_uid, None)
        self._notify()

    async def _devices_for(
        self, pod_uid: str, container: ContainerSpec, resource: str, count: int
    ) -> list[str]:
        for a in self._allocations:
            if (a.pod_uid, a.container, a.resource) == (pod_uid, container.name, resource):
                if len(a.device_ids) != count:
                    raise AdmissionError(
                        pod_uid,
                        f"pod {pod_uid} container {container.name} changed request for "
                        f"resource {resource} from {len(a.device_ids)} to {count}",
                    )
                return list(a.device_ids)
        endpoint = self._endpoint(resource)
        healthy = [d for d, h in endpoint.devices.items() if h == HEALTHY]
        if not healthy:
            raise AdmissionError(
                pod_uid,
                f"no healthy devices present; cannot allocate unhealthy devices {resource}",
            )
        own_init = [
            d
            for a in self._allocations
            if a.pod_uid == pod_uid and a.resource == resource and a.init
            for d in a.device_ids
        ]
        in_use = {
            d
            for a in self._allocations
            if a.resource == resource and not (a.pod_uid == pod_uid and a.init)
            for d in a.device_ids
        }
        # Devices released by the pod's own init containers are used first.
        reused = [d for d in own_init if d in healthy and d not in in_use][:count]
        available = [d for d in healthy if d not in in_use and d not in reused]
        if len(reused) + len(available) < count:
            raise AdmissionError(
                pod_uid,
                f"requested number of devices unavailable for {resource}. Requested: "
                f"{count}, Available: {len(reused) + len(available)}",
            )
        picked = list(reused)
        if endpoint.options.get_preferred_allocation_available and len(picked) < count:
            try:
                preferred = await self.get_preferred_allocation(
                    resource, available + reused, reused, count
                )
            except grpc.aio.AioRpcError as exc:
                raise AdmissionError(
                    pod_uid, f"Allocate failed due to {exc.details()}, which is unexpected"
                ) from exc
            # Preferred ids are taken only if they are candidates; extras are ignored.
            for d in preferred:
                if len(picked) < count and d in available and d not in picked:
                    picked.append(d)
        # The shortfall comes from the rest in no particular order (Go set iteration).
        rest = [d for d in available if d not in picked]
        self._random.shuffle(rest)
        picked += rest[: count - len(picked)]
        self._allocations.append(
            _Allocation(pod_uid, container.name, resource, picked, container.init)
        )
        return picked

    def _list_pod_resources(self) -> Any:
        # Active pods, with the devices of each container (kubelet lists app containers).
        self.pod_resources_calls += 1
        response = pr.ListPodResourcesResponse()
        for uid, (namespace, name) in sorted(self._names.items()):
            pod = pr.PodResources(namespace=namespace, name=name)
            for a in self._allocations:
                if a.pod_uid == uid and not a.init:
                    container = pr.ContainerResources(name=a.container)
                    container.devices.append(
                        pr.ContainerDevices(resource_name=a.resource, device_ids=a.device_ids)
                    )
                    pod.containers.append(container)
            response.pod_resources.append(pod)
        self._notify()
        return response


class _PodResourcesLister(pr_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    async def List(self, request: Any, context: Any) -> Any:
        return self._kubelet._list_pod_resources()


class _Registration(pb_grpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    async def Register(self, request: Any, context: Any) -> Any:
        return await self._kubelet._register(request, context)

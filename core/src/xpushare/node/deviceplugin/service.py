"""The ``v1beta1.DevicePlugin`` gRPC service of one vendor's resource.

Why thin: the decisions live elsewhere (device state in :mod:`xpushare.node.devices`, pod
matching and the vendor call in :mod:`xpushare.node.allocate`); this module translates
between kubelet's messages and those, and maps our errors to gRPC status codes whose
message kubelet puts in the pod's ``UnexpectedAdmissionError``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import grpc

from xpushare.node.allocate import AllocateError, Status
from xpushare.node.deviceplugin.proto import pb, pb_grpc
from xpushare.node.grpcerrors import status_message

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from xpushare.models import ContainerAllocation
    from xpushare.node.allocate import Allocator
    from xpushare.node.devices import DeviceView, VendorDevices

log = logging.getLogger(__name__)

#: kubelet's health strings (research/k8s-apis.md §1.3).
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_CODES = {
    Status.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    Status.PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    Status.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Status.DEADLINE: grpc.StatusCode.DEADLINE_EXCEEDED,
    Status.INTERNAL: grpc.StatusCode.INTERNAL,
}

#: Options this plugin answers with, in GetDevicePluginOptions and in Register (kubelet reads
#: only the former, research/k8s-apis.md §1.4, but both should agree).
OPTIONS = pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


def list_response(view: DeviceView) -> Any:
    """The full device list kubelet expects in every ListAndWatch message."""
    devices = []
    for d in view.kubelet_devices:
        device = pb.Device(ID=d.id, health=HEALTHY if d.healthy else UNHEALTHY)
        if d.numa_node is not None:
            device.topology.nodes.append(pb.NUMANode(ID=d.numa_node))
        devices.append(device)
    return pb.ListAndWatchResponse(devices=devices)


def container_response(allocation: ContainerAllocation) -> Any:
    """A vendor's :class:`ContainerAllocation` in kubelet's shape."""
    response = pb.ContainerAllocateResponse(
        envs=dict(allocation.envs), annotations=dict(allocation.annotations)
    )
    for m in allocation.mounts:
        response.mounts.append(
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
        )
    for d in allocation.devices:
        response.devices.append(
            pb.DeviceSpec(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
        )
    for name in allocation.cdi_devices:
        response.cdi_devices.append(pb.CDIDevice(name=name))
    return response


class DevicePluginService(pb_grpc.DevicePluginServicer):  # type: ignore[misc]
    """One vendor's resource, served to kubelet."""

    def __init__(
        self,
        *,
        vendor: str,
        resource: str,
        devices: VendorDevices,
        allocator: Allocator,
        observe: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.vendor = vendor
        self.resource = resource
        self._devices = devices
        self._allocator = allocator
        # observe(call, outcome, seconds): metrics hook, kept out of this module.
        self._observe = observe or (lambda call, outcome, seconds: None)
        self._retired = asyncio.Event()

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return OPTIONS

    async def ListAndWatch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        # A stream lives as long as the generation that served it (see end_streams).
        retired = self._retired
        seen = -1
        while not retired.is_set():
            view = self._devices.view
            if view.version == seen:
                change = asyncio.ensure_future(self._devices.wait_change(seen))
                end = asyncio.ensure_future(retired.wait())
                try:
                    await asyncio.wait({change, end}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    change.cancel()
                    end.cancel()
                continue
            seen = view.version
            yield list_response(view)

    def end_streams(self) -> None:
        """End the open ListAndWatch streams (their generation retires), so the server can
        stop at once instead of waiting out its grace period for streams that never end."""
        retired, self._retired = self._retired, asyncio.Event()
        retired.set()

    async def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        start = time.perf_counter()
        response = pb.PreferredAllocationResponse()
        for req in request.container_requests:
            picked = await self._allocator.preferred(
                self.vendor,
                self.resource,
                list(req.available_deviceIDs),
                list(req.must_include_deviceIDs),
                int(req.allocation_size),
            )
            response.container_responses.append(
                pb.ContainerPreferredAllocationResponse(deviceIDs=picked)
            )
        self._observe("preferred", "ok", time.perf_counter() - start)
        return response

    async def Allocate(self, request: Any, context: Any) -> Any:
        start = time.perf_counter()
        response = pb.AllocateResponse()
        try:
            for req in request.container_requests:
                allocation = await self._allocator.allocate(
                    self.vendor, self.resource, list(req.devices_ids)
                )
                response.container_responses.append(container_response(allocation))
        except AllocateError as exc:
            self._observe("allocate", exc.status.value, time.perf_counter() - start)
            log.warning("%s", exc)
            await context.abort(_CODES[exc.status], status_message(str(exc)))
        self._observe("allocate", "ok", time.perf_counter() - start)
        return response

    async def PreStartContainer(self, request: Any, context: Any) -> Any:
        # Not requested in OPTIONS; kubelet never calls it, but the API requires an answer.
        return pb.PreStartContainerResponse()

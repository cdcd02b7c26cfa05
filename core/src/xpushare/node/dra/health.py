"""One DRA driver's device health, streamed to kubelet (``v1alpha1.DRAResourceHealth``).

Why: kubelet 1.36 asks every DRA driver for it by default (the ResourceHealthStatus feature,
beta), and shows each allocated device's health in the pod's status
(``status.containerStatuses[].allocatedResourcesStatus``, with our reason as the message):
the DRA counterpart of the device plugin's ``ListAndWatch`` health, which kubelet shows the
same way. Without the service kubelet logs an error and the pods' status says nothing of a
GPU that fell off the bus.

The stream sends a report of every device of the vendor at once, then whenever the
vendor's view changes (a health event, a re-detection, a stuck library), and again every
:data:`RESEND_S` while nothing changes: kubelet calls a device it has not heard of within the
report's timeout (:data:`HEALTH_TIMEOUT_S`) Unknown, which is also what a device that left
the view (the vendor found no devices) becomes. Devices are named as our ResourceSlices name
them (pool: the node; device: :func:`~xpushare.node.dra.slices.device_name`), which is how
kubelet matches a report to the devices it prepared.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from xpushare.node._proto import drahealth_v1alpha1_pb2 as _health
from xpushare.node._proto import drahealth_v1alpha1_pb2_grpc as _health_grpc
from xpushare.node.dra.slices import device_name

if TYPE_CHECKING:
    from xpushare.node.devices import DeviceView, VendorDevices

#: The generated modules, as ``Any`` (see node/deviceplugin/proto.py for why).
health: Any = _health
health_grpc: Any = _health_grpc

#: Seconds kubelet keeps a report before it calls the device Unknown: twice kubelet's own
#: default (30 s), so a node agent busy for a while (a slow re-detection) does not turn every
#: device Unknown in the pods' status.
HEALTH_TIMEOUT_S = 60
#: Seconds between reports while nothing changes: a third of the timeout, so two lost or late
#: reports in a row still leave the devices' health as it was.
RESEND_S = HEALTH_TIMEOUT_S / 3
#: Longest message sent (kubelet cuts it at 1,024 bytes): our reasons are a line.
MAX_MESSAGE = 256


def report(view: DeviceView, pool: str, now: float | None = None) -> Any:
    """The NodeWatchResourcesResponse of *view*: each device HEALTHY or UNHEALTHY (with the
    reason the view holds), named in *pool* as our ResourceSlices name it."""
    stamp = int(time.time() if now is None else now)
    response = health.NodeWatchResourcesResponse()
    for device in view.devices:
        entry = response.devices.add()
        entry.device.pool_name = pool
        entry.device.device_name = device_name(device.id)
        entry.last_updated_time = stamp
        entry.health_check_timeout_seconds = HEALTH_TIMEOUT_S
        if device.healthy:
            entry.health = health.HEALTHY
        else:
            entry.health = health.UNHEALTHY
            reason = view.unhealthy_reasons.get(device.id) or "unhealthy"
            entry.message = reason[:MAX_MESSAGE]
    return response


class DraHealthService(health_grpc.DRAResourceHealthServicer):  # type: ignore[misc]
    """The DRAResourceHealth service of one driver: its vendor's devices, in *pool*."""

    def __init__(self, devices: VendorDevices, pool: str) -> None:
        self.devices = devices
        self.pool = pool
        #: Streams open now (kubelet keeps one per driver; a restarted kubelet opens anew).
        self.streams = 0

    async def NodeWatchResources(self, request: Any, context: Any) -> AsyncIterator[Any]:
        self.streams += 1
        try:
            view = self.devices.view
            while True:
                yield report(view, self.pool)
                seen = view
                try:
                    async with asyncio.timeout(RESEND_S):
                        view = await self.devices.wait_change(seen.version)
                except TimeoutError:
                    view = self.devices.view
        finally:
            self.streams -= 1


__all__ = ["HEALTH_TIMEOUT_S", "MAX_MESSAGE", "RESEND_S", "DraHealthService", "report"]

"""kubelet's PodResources API, as the release tracker reads it: which pods are still active.

Why: the API server's word that a pod is gone is not always the node's. A force-deleted pod
(``--grace-period=0 --force``) leaves the API at once while kubelet is still stopping its
containers; freeing its devices' instances then would pull them from under a running
process. kubelet's ``List`` covers only active pods (research/k8s-apis.md §2.3), so a pod it
no longer lists has no container left. It names pods by namespace and name only (no uid).

Where the socket is absent (an older kubelet, or the directory not mounted) the API server's
word alone decides; a failed call makes the answer unknown for that round, never "empty".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import grpc

from xpushare.node._proto import podresources_v1_pb2 as _pr
from xpushare.node._proto import podresources_v1_pb2_grpc as _pr_grpc

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger(__name__)

#: Messages and stubs, typed as ``Any`` once here (see deviceplugin/proto.py for why).
pr: Any = _pr
pr_grpc: Any = _pr_grpc

#: kubelet's PodResources socket (research/k8s-apis.md §2.1); it follows kubelet's root dir.
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

#: Largest List answer read: kubelet's own gRPC default (4 MiB) is far above a node's pods
#: (about 200 bytes a container), and bounds what a misbehaving socket can make us hold.
MAX_RESPONSE_BYTES = 4 << 20


class PodResources:
    """A client of one PodResources socket; :meth:`active` is the only call."""

    def __init__(self, socket: Path, *, timeout_s: float = 2.0) -> None:
        self.socket = socket
        self.timeout_s = timeout_s
        self.last_error = ""

    def available(self) -> bool:
        """Whether kubelet serves the API here (its socket exists)."""
        return self.socket.exists()

    async def active(self) -> set[tuple[str, str]] | None:
        """(namespace, name) of every pod kubelet lists; ``None`` when it did not answer."""
        if not self.available():
            self.last_error = f"{self.socket} does not exist"
            return None
        options = [("grpc.max_receive_message_length", MAX_RESPONSE_BYTES)]
        try:
            async with grpc.aio.insecure_channel(f"unix://{self.socket}", options=options) as ch:
                response = await pr_grpc.PodResourcesListerStub(ch).List(
                    pr.ListPodResourcesRequest(), timeout=self.timeout_s
                )
        except grpc.aio.AioRpcError as exc:
            error = f"{exc.code().name}: {exc.details()}"
            if error != self.last_error:
                log.warning("kubelet PodResources List on %s failed: %s", self.socket, error)
            self.last_error = error
            return None
        self.last_error = ""
        return {(p.namespace, p.name) for p in response.pod_resources}

"""One vendor's kubelet DRA plugin: the DRAPlugin service, its device health stream and its
registration, over gRPC.

Two unix sockets (research/k8s-apis.md §6.2-6.3):

* ``<plugins dir>/<driver>/dra.sock`` serves ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` and
  ``v1alpha1.DRAResourceHealth`` (node/dra/health.py), which kubelet 1.36 asks for on the
  same connection once the driver is registered;
* ``<plugins_registry>/<driver>-reg.sock`` serves ``pluginregistration.Registration``: kubelet's
  plugin watcher sees the socket appear, asks ``GetInfo`` (type ``DRAPlugin``, our driver
  name, the DRA socket, ``v1.DRAPlugin``), dials the DRA socket and reports the outcome
  with ``NotifyRegistrationStatus``.

The DRA socket is served before the registration socket exists, so kubelet never dials a
socket that does not answer yet. Removing the registration socket deregisters the driver, so
when someone removes or replaces it (a kubelet that cleans its directory) it is served
again: the watch compares the socket's inode, as the device plugin's does.

Every claim of a call gets an entry in the answer, with an error of its own when it failed
(kubelet retries those); the errors name the claim, the driver and what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any

import grpc

from xpushare.node._proto import dra_v1_pb2 as _dra
from xpushare.node._proto import dra_v1_pb2_grpc as _dra_grpc
from xpushare.node._proto import pluginregistration_v1_pb2 as _reg
from xpushare.node._proto import pluginregistration_v1_pb2_grpc as _reg_grpc
from xpushare.node.deviceplugin.generation import MAX_SOCKET_PATH, RETIRE_GRACE_S
from xpushare.node.dra.health import DraHealthService, health_grpc
from xpushare.node.dra.prepare import ClaimRef, PrepareError
from xpushare.node.grpcerrors import status_message

if TYPE_CHECKING:
    from pathlib import Path

    from xpushare.node.dra.prepare import ClaimPreparer

log = logging.getLogger(__name__)

#: The generated modules, as ``Any`` (see node/deviceplugin/proto.py for why).
dra: Any = _dra
dra_grpc: Any = _dra_grpc
reg: Any = _reg
reg_grpc: Any = _reg_grpc

#: PluginInfo.type of a DRA driver, and the service versions served, preferred first.
PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin",)

#: Claims in one kubelet call: kubelet sends one pod's claims (a pod has at most 128 claims,
#: core/v1 validation), so more is not kubelet.
MAX_CLAIMS_PER_CALL = 128


def _inode(path: Path) -> tuple[int, int] | None:
    # With the ctime: a socket made anew may get the inode number of the one it replaced.
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_ctime_ns


def _refs(claims: Any) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


class DraService(dra_grpc.DRAPluginServicer):  # type: ignore[misc]
    """The DRAPlugin service of one driver."""

    def __init__(self, preparer: ClaimPreparer) -> None:
        self.preparer = preparer

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        response = dra.NodePrepareResourcesResponse()
        if len(request.claims) > MAX_CLAIMS_PER_CALL:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{len(request.claims)} claims in one call; at most {MAX_CLAIMS_PER_CALL}",
            )
        for ref in _refs(request.claims):
            try:
                devices = await self.preparer.prepare(ref)
            except PrepareError as exc:
                log.warning("%s", exc)
                response.claims[ref.uid].error = status_message(str(exc))
                continue
            entry = response.claims[ref.uid]
            entry.SetInParent()  # an entry even when the claim has no devices of ours
            for device in devices:
                entry.devices.append(dra.Device(**device))
        return response

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        response = dra.NodeUnprepareResourcesResponse()
        if len(request.claims) > MAX_CLAIMS_PER_CALL:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{len(request.claims)} claims in one call; at most {MAX_CLAIMS_PER_CALL}",
            )
        for ref in _refs(request.claims):
            try:
                await self.preparer.unprepare(ref)
            except PrepareError as exc:
                log.warning("%s", exc)
                response.claims[ref.uid].error = status_message(str(exc))
                continue
            response.claims[ref.uid].SetInParent()
        return response


class RegistrationService(reg_grpc.RegistrationServicer):  # type: ignore[misc]
    """What kubelet's plugin watcher asks on the registration socket."""

    def __init__(self, server: DraPluginServer) -> None:
        self.server = server

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.server.driver,
            endpoint=str(self.server.dra_socket),
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.server.notified(bool(request.plugin_registered), str(request.error)[:500])
        return reg.RegistrationStatusResponse()


class DraPluginServer:
    """Serves one driver to kubelet for the life of :meth:`run` (see the module docstring)."""

    def __init__(
        self,
        preparer: ClaimPreparer,
        *,
        plugins_dir: Path,
        registry_dir: Path,
        poll_s: float,
    ) -> None:
        self.preparer = preparer
        self.driver = preparer.driver
        self.dra_socket = plugins_dir / self.driver / "dra.sock"
        self.registration_socket = registry_dir / f"{self.driver}-reg.sock"
        self.poll_s = poll_s
        self.registered = False
        self.registrations = 0
        self.last_error = ""
        self._changed = asyncio.Event()
        #: The device health stream, pool named after the node as our ResourceSlices are.
        self.health = DraHealthService(preparer.devices, preparer.node)

    def notified(self, registered: bool, error: str) -> None:
        self.registered = registered
        self.last_error = error
        if registered:
            self.registrations += 1
            log.info("DRA driver %s: registered with kubelet", self.driver)
        else:
            log.warning("DRA driver %s: kubelet refused the registration: %s", self.driver, error)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_registered(self, after: int = 0) -> int:
        """Wait until kubelet accepted a registration beyond the *after*-th."""
        while not (self.registered and self.registrations > after):
            changed = self._changed
            await changed.wait()
        return self.registrations

    async def run(self) -> None:
        await asyncio.to_thread(self.preparer.checkpoints.load)
        dra_server = await self._serve(self.dra_socket, self._add_dra)
        try:
            while True:
                server = await self._serve(self.registration_socket, self._add_registration)
                try:
                    await self._watch(_inode(self.registration_socket))
                finally:
                    self.registered = False
                    await asyncio.shield(server.stop(RETIRE_GRACE_S))
                log.info(
                    "DRA driver %s: registration socket is gone; serving it again", self.driver
                )
        finally:
            await asyncio.shield(dra_server.stop(RETIRE_GRACE_S))
            with contextlib.suppress(OSError):
                self.registration_socket.unlink()

    def _add_dra(self, server: Any) -> None:
        dra_grpc.add_DRAPluginServicer_to_server(DraService(self.preparer), server)
        health_grpc.add_DRAResourceHealthServicer_to_server(self.health, server)

    def _add_registration(self, server: Any) -> None:
        reg_grpc.add_RegistrationServicer_to_server(RegistrationService(self), server)

    async def _serve(self, path: Path, add: Any) -> grpc.aio.Server:
        path.parent.mkdir(parents=True, exist_ok=True)
        private = path.parent / f".{path.name}.{os.getpid()}"
        if len(os.fsencode(private)) > MAX_SOCKET_PATH:
            raise ValueError(
                f"DRA socket directory {path.parent} is too long for a unix socket path "
                f"({len(os.fsencode(private))} > {MAX_SOCKET_PATH} bytes): use a shorter one"
            )
        with contextlib.suppress(FileNotFoundError):
            private.unlink()
        server = grpc.aio.server()
        add(server)
        server.add_insecure_port(f"unix://{private}")
        await server.start()
        # Renamed into place once it answers: kubelet never sees a socket that is not ready.
        private.replace(path)
        log.info("DRA driver %s: serving %s", self.driver, path)
        return server

    async def _watch(self, inode: tuple[int, int] | None) -> None:
        while _inode(self.registration_socket) == inode:
            await asyncio.sleep(self.poll_s)

"""Serving one device plugin to kubelet in *generations*, across kubelet restarts.

A generation is: a gRPC server on the plugin's socket in kubelet's device-plugin directory,
and one accepted registration with the kubelet that is running then. kubelet tells plugins
to register again only by deleting their sockets when it starts (research/k8s-apis.md §1.4),
so each :class:`PluginServer` watches the directory (inotify through
:class:`~xpushare.node.dirwatch.DirectoryWatch`, with polling beneath): when its socket is
gone (or replaced), or kubelet.sock was re-created, the generation retires and a new one
starts. The rules (GPUStack's,
research/gpustack-devices.md §4.2):

* **serve before registering**: kubelet dials the plugin back from inside Register, so the
  server must already answer on its socket;
* **retry registration** until kubelet accepts it (kubelet.sock may not be back yet), each
  attempt bounded, and counted for the generation that made it;
* **the socket is replaced only at the start of a generation**, never removed at its end, so
  a retiring generation cannot delete its successor's socket. grpc removes a unix socket's
  path when its server stops, so each generation binds a private path and renames it onto
  the public one once it serves: the public name appears atomically, already answering, and
  the retiring server's cleanup finds only its own (already renamed) private path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from xpushare.node.deviceplugin.proto import pb, pb_grpc
from xpushare.node.deviceplugin.service import OPTIONS

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from xpushare.node.config import NodeConfig
    from xpushare.node.deviceplugin.service import DevicePluginService
    from xpushare.node.dirwatch import DirectoryWatch

log = logging.getLogger(__name__)

#: The first wait after a refused registration, doubled per attempt up to
#: ``register_retry_s``: kubelet creates its socket before it serves on it, so the first dial
#: after the directory watch wakes us can be refused (the re-registration target is 50 ms).
FIRST_RETRY_S = 0.025

#: The device-plugin API version this plugin speaks (research/k8s-apis.md §1.3).
API_VERSION = "v1beta1"

#: Seconds a retiring generation's server gives an Allocate in flight to finish (streams
#: are ended first). Allocate answers within its own deadline; at shutdown, a second is what
#: a DaemonSet pod's termination can spare.
RETIRE_GRACE_S = 1.0

#: Longest unix socket path the kernel takes (sizeof(sun_path) - 1 on Linux).
MAX_SOCKET_PATH = 107


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


@dataclass(frozen=True)
class PluginStatus:
    """What probes and metrics show about one device plugin."""

    vendor: str
    resource: str
    socket: str
    generation: int
    registered: bool
    registrations: int
    last_error: str


class PluginServer:
    """Serves one vendor resource to kubelet for the life of :meth:`run` (see module doc)."""

    def __init__(
        self,
        service: DevicePluginService,
        config: NodeConfig,
        *,
        on_registered: Callable[[PluginServer], None] | None = None,
        watch: DirectoryWatch | None = None,
    ) -> None:
        self.service = service
        # Wakes the waits below when the directory changes; without it they poll.
        self._watch_dir = watch
        self.config = config
        self.socket_name = f"xpushare-{service.vendor}.sock"
        self.socket_path = config.device_plugin_dir / self.socket_name
        self.generation = 0
        self.registered = False
        self.registrations = 0
        self.last_error = ""
        self._on_registered = on_registered or (lambda server: None)
        self._changed = asyncio.Event()

    @property
    def status(self) -> PluginStatus:
        return PluginStatus(
            vendor=self.service.vendor,
            resource=self.service.resource,
            socket=str(self.socket_path),
            generation=self.generation,
            registered=self.registered,
            registrations=self.registrations,
            last_error=self.last_error,
        )

    async def wait_registered(self, after: int = 0) -> int:
        """Wait until a registration of a generation newer than *after* was accepted."""
        while not (self.registered and self.generation > after):
            changed = self._changed
            await changed.wait()
        return self.generation

    def _signal(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def run(self) -> None:
        """Serve generation after generation until cancelled."""
        while True:
            self.generation += 1
            self.registered = False
            self._signal()
            server, inode = await self._serve()
            try:
                kubelet_inode = await self._register(inode)
                if kubelet_inode is not None:
                    await self._watch(inode, kubelet_inode)
            finally:
                self.registered = False
                self._signal()
                self.service.end_streams()
                # Shielded: a cancelled run() must still stop its server before returning.
                await asyncio.shield(server.stop(RETIRE_GRACE_S))

    async def _serve(self) -> tuple[grpc.aio.Server, int]:
        directory = self.config.device_plugin_dir
        directory.mkdir(parents=True, exist_ok=True)
        private = directory / f".{self.socket_name}.{os.getpid()}.{self.generation}"
        if len(os.fsencode(private)) > MAX_SOCKET_PATH:
            raise ValueError(
                f"device-plugin directory {directory} is too long for a unix socket path "
                f"({len(os.fsencode(private))} > {MAX_SOCKET_PATH} bytes): use a shorter one"
            )
        with contextlib.suppress(FileNotFoundError):
            private.unlink()
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(self.service, server)
        server.add_insecure_port(f"unix://{private}")
        await server.start()
        # The start of a generation is the one place the public socket is replaced.
        private.replace(self.socket_path)
        inode = _inode(self.socket_path)
        if inode is None:  # pragma: no cover - only if someone deletes it within microseconds
            inode = -1
        log.info(
            "device plugin %s: generation %d serving on %s",
            self.service.resource,
            self.generation,
            self.socket_path,
        )
        return server, inode

    async def _pause(self, seen: int, seconds: float) -> int:
        """Wait *seconds*, or less when the directory changed since version *seen*."""
        if self._watch_dir is None:
            await asyncio.sleep(seconds)
            return seen
        return await self._watch_dir.wait(seen, seconds)

    def _version(self) -> int:
        return self._watch_dir.version if self._watch_dir is not None else 0

    def _ours(self, inode: int) -> bool:
        return _inode(self.socket_path) == inode

    async def _register(self, inode: int) -> int | None:
        """Register until kubelet accepts; kubelet.sock's inode then, or None if our socket
        went away meanwhile (start a new generation)."""
        kubelet_socket = self.config.kubelet_socket
        request = pb.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket_name,
            resource_name=self.service.resource,
            options=OPTIONS,
        )
        attempts = 0
        while self._ours(inode):
            seen = self._version()
            kubelet_inode = _inode(kubelet_socket)
            if kubelet_inode is not None:
                attempts += 1
                try:
                    async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
                        await pb_grpc.RegistrationStub(channel).Register(
                            request, timeout=self.config.register_timeout_s
                        )
                except grpc.aio.AioRpcError as exc:
                    self.last_error = f"{exc.code().name}: {exc.details()}"
                    if attempts == 1 or attempts % 40 == 0:
                        log.warning(
                            "device plugin %s: registering to kubelet, retrying: %s",
                            self.service.resource,
                            self.last_error,
                        )
                else:
                    self.registered = True
                    self.registrations += 1
                    self.last_error = ""
                    log.info(
                        "device plugin %s: registered with kubelet (generation %d)",
                        self.service.resource,
                        self.generation,
                    )
                    self._signal()
                    self._on_registered(self)
                    return kubelet_inode
                # A new kubelet.sock can exist a moment before kubelet answers on it: retry
                # soon, then back off to the configured interval.
                await asyncio.sleep(
                    min(self.config.register_retry_s, FIRST_RETRY_S * 2 ** (attempts - 1))
                )
            else:
                # No kubelet.sock: it appearing is the change worth waking for.
                await self._pause(seen, self.config.register_retry_s)
        return None

    async def _watch(self, inode: int, kubelet_inode: int) -> None:
        """Return when this generation is over: our socket was deleted or replaced (kubelet
        restarted and wiped its directory), or kubelet.sock was re-created.

        It looks before it waits: kubelet can restart between accepting our Register and
        this task resuming, and a watch that only woke on the *next* change would miss that
        restart's events and sleep through a whole poll interval unregistered. The version
        is read before the look, so a change after it still ends the wait."""
        while True:
            seen = self._version()
            if not self._ours(inode):
                log.info(
                    "device plugin %s: socket %s is gone (kubelet restarted?); re-registering",
                    self.service.resource,
                    self.socket_path,
                )
                return
            current = _inode(self.config.kubelet_socket)
            if current is not None and current != kubelet_inode:
                log.info(
                    "device plugin %s: kubelet.sock was re-created; re-registering",
                    self.service.resource,
                )
                return
            await self._pause(seen, self.config.socket_poll_s)

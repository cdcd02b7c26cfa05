"""A fake kubelet for DRA drivers: its plugin watcher and its DRA client, over real gRPC.

What it does, as kubelet does (research/k8s-apis.md §6.2-6.3): it watches a
``plugins_registry`` directory for sockets; for each new one it calls ``GetInfo``, checks the
type is ``DRAPlugin`` and picks the first version it speaks (``v1.DRAPlugin``), dials the
endpoint, and answers with ``NotifyRegistrationStatus``. Then a test calls
:meth:`FakeDraKubelet.prepare` and :meth:`FakeDraKubelet.unprepare` as kubelet does around a
pod's life, over the driver's own socket. For plugin authors too::

    kubelet = FakeDraKubelet(registry_dir)
    await kubelet.start()
    await kubelet.wait_registered("acme.xpushare.io")
    answer = await kubelet.prepare("acme.xpushare.io", [("default", "claim-a", uid)])
    devices = answer[uid].devices   # each with cdi_device_ids
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from xpushare.node.dra.plugin import PLUGIN_TYPE, dra, dra_grpc, reg, reg_grpc

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

__all__ = ["ClaimAnswer", "FakeDraKubelet"]

log = logging.getLogger(__name__)

#: The versions this kubelet speaks, as kubelet 1.34+ does.
KUBELET_VERSIONS = ("v1.DRAPlugin",)


@dataclass(frozen=True)
class ClaimAnswer:
    """One claim's entry of a prepare or unprepare answer."""

    error: str
    #: Each device as a dict: request_names, pool_name, device_name, cdi_device_ids, share_id.
    devices: tuple[dict[str, Any], ...] = ()


@dataclass
class _Driver:
    endpoint: str
    registration_socket: str
    inode: int
    versions: tuple[str, ...] = field(default_factory=tuple)
    serial: int = 0  # which of the kubelet's registrations this was (1 = the first)


class FakeDraKubelet:
    """kubelet's DRA side in a test (see the module docstring)."""

    def __init__(
        self, registry_dir: Path, *, poll_s: float = 0.01, timeout_s: float = 10.0
    ) -> None:
        self.registry_dir = registry_dir
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.drivers: dict[str, _Driver] = {}
        #: Registrations accepted so far, of every driver: a test that restarts a driver
        #: waits for this to pass its value from before (the old entry in :attr:`drivers`
        #: stays until the next scan sees the old socket gone).
        self.registrations = 0
        #: Registration attempts refused, as (socket, reason).
        self.refused: list[tuple[str, str]] = []
        self._task: asyncio.Task[None] | None = None
        self._seen: dict[str, int] = {}

    async def start(self) -> None:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def forget(self) -> None:
        """Forget every registration, as a restarted kubelet does; sockets are asked again."""
        self.drivers.clear()
        self._seen.clear()

    async def wait_registered(
        self, driver: str, timeout_s: float | None = None, *, after: int = 0
    ) -> None:
        """Wait until *driver* is registered by a registration beyond the *after*-th."""
        await self.wait_until(
            lambda: driver in self.drivers and self.drivers[driver].serial > after,
            f"{driver} registered (after registration {after})",
            timeout_s,
        )

    async def wait_until(
        self, check: Callable[[], bool], what: str, timeout_s: float | None = None
    ) -> None:
        async def wait() -> None:
            while not check():
                await asyncio.sleep(self.poll_s)

        try:
            async with asyncio.timeout(timeout_s or self.timeout_s):
                await wait()
        except TimeoutError:
            raise AssertionError(f"fake DRA kubelet: not reached: {what}") from None

    async def prepare(
        self, driver: str, claims: Sequence[tuple[str, str, str]]
    ) -> dict[str, ClaimAnswer]:
        """NodePrepareResources of (namespace, name, uid) *claims* at *driver*."""
        request = dra.NodePrepareResourcesRequest(claims=[self._claim(c) for c in claims])
        response = await self._call(driver, "NodePrepareResources", request)
        return {
            uid: ClaimAnswer(
                error=entry.error,
                devices=tuple(
                    {
                        "request_names": list(d.request_names),
                        "pool_name": d.pool_name,
                        "device_name": d.device_name,
                        "cdi_device_ids": list(d.cdi_device_ids),
                        "share_id": d.share_id if d.HasField("share_id") else None,
                    }
                    for d in entry.devices
                ),
            )
            for uid, entry in response.claims.items()
        }

    async def unprepare(
        self, driver: str, claims: Sequence[tuple[str, str, str]]
    ) -> dict[str, ClaimAnswer]:
        request = dra.NodeUnprepareResourcesRequest(claims=[self._claim(c) for c in claims])
        response = await self._call(driver, "NodeUnprepareResources", request)
        return {uid: ClaimAnswer(error=entry.error) for uid, entry in response.claims.items()}

    @staticmethod
    def _claim(claim: tuple[str, str, str]) -> Any:
        namespace, name, uid = claim
        return dra.Claim(namespace=namespace, name=name, uid=uid)

    async def _call(self, driver: str, method: str, request: Any) -> Any:
        found = self.drivers.get(driver)
        if found is None:
            raise AssertionError(f"fake DRA kubelet: driver {driver} is not registered")
        async with grpc.aio.insecure_channel(f"unix://{found.endpoint}") as channel:
            stub = dra_grpc.DRAPluginStub(channel)
            return await getattr(stub, method)(request, timeout=self.timeout_s)

    async def _watch(self) -> None:
        while True:
            current: dict[str, int] = {}
            with contextlib.suppress(OSError):
                for path in self.registry_dir.iterdir():
                    if path.name.endswith(".sock") and not path.name.startswith("."):
                        with contextlib.suppress(OSError):
                            # A socket made anew may reuse the old inode; its ctime differs.
                            stat = path.stat()
                            current[str(path)] = hash((stat.st_ino, stat.st_ctime_ns))
            for socket, inode in current.items():
                if self._seen.get(socket) != inode:
                    self._seen[socket] = inode
                    await self._register(socket, inode)
            for name, driver in list(self.drivers.items()):
                if current.get(driver.registration_socket) != driver.inode:
                    del self.drivers[name]  # the socket went away: deregistered
            for socket in set(self._seen) - set(current):
                del self._seen[socket]
            await asyncio.sleep(self.poll_s)

    async def _register(self, socket: str, inode: int) -> None:
        try:
            async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
                stub = reg_grpc.RegistrationStub(channel)
                info = await stub.GetInfo(reg.InfoRequest(), timeout=self.timeout_s)
                reason = ""
                if info.type != PLUGIN_TYPE:
                    reason = f"plugin type {info.type!r} is not {PLUGIN_TYPE}"
                versions = [v for v in info.supported_versions if v in KUBELET_VERSIONS]
                if not reason and not versions:
                    reason = f"none of {list(info.supported_versions)} is spoken here"
                if not reason:
                    # kubelet dials the endpoint before it reports success.
                    async with grpc.aio.insecure_channel(f"unix://{info.endpoint}") as dra_channel:
                        async with asyncio.timeout(self.timeout_s):
                            await dra_channel.channel_ready()
                await stub.NotifyRegistrationStatus(
                    reg.RegistrationStatus(plugin_registered=not reason, error=reason),
                    timeout=self.timeout_s,
                )
        except (grpc.aio.AioRpcError, TimeoutError) as exc:
            self.refused.append((socket, str(exc)))
            return
        if reason:
            self.refused.append((socket, reason))
            return
        self.registrations += 1
        self.drivers[info.name] = _Driver(
            info.endpoint, socket, inode, tuple(versions), self.registrations
        )

"""Helpers for the node agent's tests: the mock vendor, a fake kubelet, an in-memory node.

Everything runs through the real paths: the plugin host calls the mock vendor on its library
thread, the agent serves kubelet's gRPC API over unix sockets in a short temporary
directory, and the fake kubelet registers, watches and admits pods over those sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.node import NodeAgent, NodeConfig
from xpushare.node.tasks import TaskFailed
from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS, mock
from xpushare.testing.kube import InMemoryKube
from xpushare.testing.kubelet import FakeKubelet

NODE = "node-a"
RESOURCE = "xpushare.io/mock-gpu"


@pytest.fixture
def plugin_dir() -> Any:
    # Not tmp_path: a unix socket path has at most 107 bytes and pytest's are long.
    path = Path(tempfile.mkdtemp(prefix="xpn", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def fast_config(plugin_dir: Path, **overrides: Any) -> NodeConfig:
    """Intervals in milliseconds, so tests wait on events rather than on clocks."""
    base = NodeConfig(
        node_name=NODE,
        device_plugin_dir=plugin_dir,
        metrics_host="127.0.0.1",
        metrics_port=0,
        detect_interval_s=30.0,
        monitor_interval_s=0.02,
        health_interval_s=0.02,
        health_wait_s=0.01,
        reconcile_interval_s=30.0,
        socket_poll_s=0.01,
        register_retry_s=0.01,
        register_timeout_s=2.0,
        allocate_deadline_s=2.0,
        partition_lock_path=None,
    )
    return replace(base, **overrides)


def mock_host(devices: str = "8x A100-80GB", *extra: tuple[str, object]) -> PluginHost:
    host = PluginHost(
        HostSettings(strict=True),
        core_plugins=CORE_PLUGINS,
        node_name=NODE,
        vendor_config={"mock": {"devices": devices}},
    )
    host.register("mock", mock)
    for name, plugin in extra:
        host.register(name, plugin)
    return host


def one_slice(
    device: str, memory: int = 4096, compute: int = 25, name: str = "main"
) -> PodAssignment:
    return PodAssignment(
        node=NODE,
        containers=(
            ContainerAssignment(
                container=name,
                vendor="mock",
                devices=(
                    DeviceSlice(device_id=device, memory_mib=memory, compute_percent=compute),
                ),
            ),
        ),
    )


@dataclass
class Running:
    agent: NodeAgent
    kubelet: FakeKubelet
    kube: Any
    task: asyncio.Task[None]

    async def stop(self) -> None:
        await self.agent.stop()
        with contextlib.suppress(TaskFailed):
            await self.task


@contextlib.asynccontextmanager
async def running(
    plugin_dir: Path,
    *,
    host: PluginHost | None = None,
    kube: Any = None,
    kubelet: FakeKubelet | None = None,
    wait_for: str | None = RESOURCE,
    **config: Any,
) -> AsyncIterator[Running]:
    """An agent and a fake kubelet, started; *wait_for*'s plugin registered and listed."""
    host = host or mock_host()
    kube = kube if kube is not None else InMemoryKube(NODE)
    own_kubelet = kubelet is None
    kubelet = kubelet or FakeKubelet(plugin_dir, dial_timeout_s=2.0)
    if own_kubelet:
        await kubelet.start()
    agent = NodeAgent(fast_config(plugin_dir, **config), host, kube)
    task = asyncio.create_task(agent.run())
    run = Running(agent, kubelet, kube, task)
    try:
        if wait_for is not None:
            await kubelet.wait_until(
                lambda: kubelet.registered(wait_for) and kubelet.updates(wait_for) > 0,
                what=f"{wait_for} registered and listed",
            )
        yield run
    finally:
        await run.stop()
        if own_kubelet:
            await kubelet.stop()
        host.close()


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll *check* on the loop (for state that has no change event of its own)."""

    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.005)

    try:
        await asyncio.wait_for(wait(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"not reached: {what}") from None

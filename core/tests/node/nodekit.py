"""Helpers for the node agent's tests: the mock vendor, a fake kubelet, an in-memory node.

Everything runs through the real paths: the plugin host calls the mock vendor on its library
thread, the agent serves kubelet's gRPC API over unix sockets in a short temporary
directory, and the fake kubelet registers, watches and admits pods over those sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.plugins import PluginHost
from xpushare.plugins.builtin import mock
from xpushare.testing.hosts import vendor_host
from xpushare.testing.kube import InMemoryKube
from xpushare.testing.kubelet import FakeKubelet
from xpushare.testing.nodeagent import (
    RunningAgent,
    run_node_agent,
    short_socket_dir,
)

NODE = "node-a"
RESOURCE = "xpushare.io/mock-gpu"


@pytest.fixture
def plugin_dir() -> Any:
    with short_socket_dir("xpn") as path:
        yield path


def mock_host(devices: str = "8x A100-80GB", *extra: tuple[str, object]) -> PluginHost:
    host = vendor_host("mock", mock, {"devices": devices}, node_name=NODE, strict=True)
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


@contextlib.asynccontextmanager
async def running(
    plugin_dir: Path,
    *,
    host: PluginHost | None = None,
    kube: Any = None,
    kubelet: FakeKubelet | None = None,
    wait_for: str | None = RESOURCE,
    **config: Any,
) -> AsyncIterator[RunningAgent]:
    """An agent and a fake kubelet, started; *wait_for*'s plugin registered and listed."""
    async with run_node_agent(
        host or mock_host(),
        kube if kube is not None else InMemoryKube(NODE),
        plugin_dir,
        kubelet=kubelet,
        wait_for=wait_for,
        **config,
    ) as run:
        yield run


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll *check* on the loop (for state that has no change event of its own)."""

    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.005)

    try:
        await asyncio.wait_for(wait(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"not reached: {what}") from None

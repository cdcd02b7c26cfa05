"""The whole node-side pod flow with the NVIDIA plugin on the fake NVML.

The node agent serves kubelet's device-plugin API over unix sockets; a fake kubelet
registers it, lists the GPUs' share slots and admits a pod whose assignment (chosen by this
plugin's own NVLink-aware fit) was written at bind. The container must receive HAMi-core's
limits exactly as HAMi-core reads them. Then an XID makes one GPU's slots unhealthy in
kubelet's view, and they come back once the GPU behaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_hamicore import Proc, Region, v1_bytes, write
from fake_nvml import FakeNvml, uuid
from nvidia_kit import NODE, base_config

from xpushare.models import ContainerAssignment, ContainerRequest, NodeView, PodAssignment
from xpushare.node import NodeAgent
from xpushare.plugins import PluginHost
from xpushare.testing.hosts import vendor_host
from xpushare.testing.kube import InMemoryKube
from xpushare.testing.kubelet import ContainerSpec, FakeKubelet
from xpushare.testing.nodeagent import run_node_agent, short_socket_dir
from xpushare_nvidia import plugin

RESOURCE = "nvidia.com/gpu"
#: Only bounds waits that end at once unless the code under test is broken.
SAFETY_S = 10.0


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    with short_socket_dir("xpnv") as path:
        yield path


@contextlib.asynccontextmanager
async def agent(
    plugin_dir: Path, driver_root: Path, hami_dir: Path
) -> AsyncIterator[tuple[NodeAgent, FakeKubelet, InMemoryKube, PluginHost]]:
    host = vendor_host(
        "nvidia", plugin, base_config(driver_root, hami_dir), node_name=NODE, strict=True
    )
    kube = InMemoryKube(NODE)
    async with run_node_agent(host, kube, plugin_dir, wait_for=RESOURCE) as running:
        yield running.agent, running.kubelet, kube, host


def healthy_slots(kubelet: FakeKubelet, gpu: str) -> tuple[int, int]:
    states = [h for d, h in kubelet.devices(RESOURCE).items() if d.startswith(gpu)]
    return sum(1 for h in states if h == "Healthy"), len(states)


async def eventually(check: Callable[[], Any], what: str) -> None:
    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.005)

    try:
        await asyncio.wait_for(wait(), SAFETY_S)
    except TimeoutError:
        raise AssertionError(f"not reached: {what}") from None


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=SAFETY_S) as response:
        return str(response.read().decode())


async def scrape(node_agent: NodeAgent) -> str:
    return await asyncio.to_thread(_get, f"http://127.0.0.1:{node_agent.http_port}/metrics")


async def eventually_async(fetch: Callable[[], Awaitable[str]], wanted: str) -> None:
    async def wait() -> None:
        while wanted not in await fetch():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(wait(), SAFETY_S)
    except TimeoutError:
        raise AssertionError(f"not served: {wanted}") from None


async def test_bind_to_allocate_with_hami_core_limits_and_health(
    plugin_dir: Path, driver_root: Path, hami_dir: Path, fake: FakeNvml
) -> None:
    fake.add_gpus(4, numa=[0, 0, 1, 1])
    fake.nvlink(0, 1, 4)
    fake.nvlink(2, 3, 4)
    async with agent(plugin_dir, driver_root, hami_dir) as (node_agent, kubelet, kube, host):
        # kubelet sees every GPU's share slots.
        assert kubelet.capacity(RESOURCE) == 4 * 10

        # What the scheduler does at /filter and /bind, with this plugin's fit: two GPUs
        # for one container on this node go to an NVLink pair.
        handle = host.vendor("nvidia")
        devices = handle.detect()
        request = ContainerRequest(vendor="nvidia", count=2, memory_mib=8000, compute_percent=30)
        fit = handle.fit(
            request=request,
            node=NodeView(name=NODE, devices=devices),
            usage={},
            device_order=[uuid(1), uuid(2), uuid(0), uuid(3)],
        )
        assert {s.device_id for s in fit.devices} == {uuid(0), uuid(1)}
        assignment = PodAssignment(
            node=NODE,
            containers=(
                ContainerAssignment(container="main", vendor="nvidia", devices=fit.devices),
            ),
        )
        pod = kube.add_pod("trainer", namespace="ml")
        kube.bind(pod, assignment)

        result = await kubelet.admit_pod(pod.uid, [ContainerSpec("main", {RESOURCE: 2})])
        envs = result["main"].envs
        assert envs["NVIDIA_VISIBLE_DEVICES"] == f"{uuid(0)},{uuid(1)}"
        assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8000m"
        assert envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "8000m"
        assert envs["CUDA_DEVICE_SM_LIMIT_0"] == "30"
        assert envs["CUDA_DEVICE_SM_LIMIT_1"] == "30"
        assert envs["CUDA_DEVICE_SM_LIMIT"] == "30"
        assert envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/vgpu.cache"
        mounts = result["main"].mounts
        assert mounts["/etc/ld.so.preload"] == ("/usr/local/vgpu/ld.so.preload", True)
        assert mounts["/usr/local/vgpu/libvgpu.so"] == ("/usr/local/vgpu/libvgpu.so", True)
        assert mounts["/usr/local/vgpu"] == (
            f"/usr/local/vgpu/containers/{pod.uid}_main",
            False,
        )
        cache_dir = hami_dir / "containers" / f"{pod.uid}_main"
        assert cache_dir.is_dir()

        # The container's HAMi-core writes its accounting file; the agent's monitor reads it
        # and /metrics shows the container's usage under its pod's name.
        region = Region(
            uuids=[uuid(0), uuid(1)],
            limits_mib=[8000, 8000],
            sm_limits=[30, 30],
            procs=[Proc(pid=7, used_mib={0: 3000, 1: 1000}, sm_util={0: 25})],
        )
        write(cache_dir, v1_bytes(region))
        series = (
            f'xpushare_container_memory_used_bytes{{container="main",device="{uuid(0)}",'
            f'namespace="ml",node="{NODE}",pod="trainer",vendor="nvidia"}}'
        )
        await eventually_async(lambda: scrape(node_agent), series)
        (line,) = [x for x in (await scrape(node_agent)).splitlines() if x.startswith(series)]
        assert float(line.split()[-1]) == 3000 * 2**20

        # GPU 2 falls off the bus (XID 79, then "GPU is lost"): its slots leave kubelet's
        # healthy devices, the node agent keeps running...
        assert healthy_slots(kubelet, uuid(2)) == (10, 10)
        fake.lose(2)
        fake.push_xid(2, 79)
        await eventually(lambda: healthy_slots(kubelet, uuid(2)) == (0, 10), "GPU 2 unhealthy")
        assert healthy_slots(kubelet, uuid(3)) == (10, 10)
        # ...and once it is back and quiet (recovery_quiet_s is 0 here), so are its slots.
        fake.lose(2, False)
        await eventually(lambda: healthy_slots(kubelet, uuid(2)) == (10, 10), "GPU 2 back")
        assert fake.thread_violations == 0

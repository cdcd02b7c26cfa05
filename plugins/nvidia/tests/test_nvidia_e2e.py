"""An NVIDIA pod through the whole system, on the fake NVML: webhook, /filter, /bind, Allocate.

The same flow as the core's end-to-end test (tests/e2e/test_pod_flow.py), with this plugin
as the vendor on both sides: the node agent detects the fake GPUs through the real loading
path and publishes them; the scheduler places a two-GPU pod with this plugin's fit (an
NVLink pair); kubelet's Allocate gives the container HAMi-core's limits.
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path
from typing import Any

from fake_nvml import FakeNvml, uuid
from nvidia_kit import base_config

from xpushare.codec import decode_assignment
from xpushare.plugins import PluginHost
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.kubelet import ContainerSpec
from xpushare.testing.partitions import A100_40GB, A100_80GB
from xpushare.testing.podflow import PodFlow
from xpushare_nvidia import plugin

NODE = "gpu-node"
GPU = "nvidia.com/gpu"


def nvidia_host(config: dict[str, Any]) -> PluginHost:
    return vendor_host("nvidia", plugin, config, node_name=NODE, strict=True)


async def test_a_two_gpu_pod_gets_an_nvlink_pair_with_hami_core_limits(
    fake: FakeNvml, driver_root: Path, hami_dir: Path
) -> None:
    # Four GPUs; NVLink pairs 0-2 and 1-3, PCIe otherwise: a walk in index order (what the
    # core's default does on identical idle GPUs) would take 0 and 1, which share no NVLink.
    fake.add_gpus(4, numa=[0, 1, 0, 1])
    fake.nvlink(0, 2, 4)
    fake.nvlink(1, 3, 4)
    config = base_config(driver_root, hami_dir)
    async with PodFlow(
        nvidia_host(config), nvidia_host(config), vendor="nvidia", node_name=NODE
    ) as flow:
        assert flow.resource == GPU
        await flow.kubelet.wait_until(lambda: flow.kubelet.allocatable(GPU) == 40, what="listed")

        # The webhook admits a HAMi-style pod spec; /filter and /bind place it.
        bound = await flow.schedule(
            pod(
                "train",
                limits={GPU: "2", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"},
            )
        )
        assignment = decode_assignment(bound["metadata"]["annotations"]["xpushare.io/assignment"])
        (container,) = assignment.containers
        chosen = {s.device_id for s in container.devices}
        assert chosen in ({uuid(0), uuid(2)}, {uuid(1), uuid(3)}), "an NVLink pair"

        # kubelet admits it: the container gets HAMi-core's contract.
        admitted = await flow.allocate(bound, [ContainerSpec("main", {GPU: 2})])
        envs = admitted["main"].envs
        assert set(envs["NVIDIA_VISIBLE_DEVICES"].split(",")) == chosen
        for i in (0, 1):
            assert envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] == "8000m"
            assert envs[f"CUDA_DEVICE_SM_LIMIT_{i}"] == "30"
        assert envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/vgpu.cache"
        assert "/etc/ld.so.preload" in admitted["main"].mounts
        await flow.handoff_served()
    assert fake.thread_violations == 0


async def test_two_pods_share_one_a100_through_mig_instances_made_for_them(
    fake: FakeNvml, driver_root: Path, hami_dir: Path
) -> None:
    """Dynamic MIG end to end: the scheduler picks each pod's profile and placement from the
    geometry the agent published, Allocate creates the instances, deleting the pods destroys
    them."""
    fake.add_gpus(1)
    fake.enable_mig(0)
    fake.mig_profiles(0, A100_80GB)
    config = {**base_config(driver_root, hami_dir), "mode": "mig"}
    async with PodFlow(
        nvidia_host(config), nvidia_host(config), vendor="nvidia", node_name=NODE
    ) as flow:
        await flow.kubelet.wait_until(lambda: flow.kubelet.allocatable(GPU) == 7, what="listed")
        places: list[str | None] = []
        migs: list[str] = []
        pods = []
        for spec in (
            pod("big", limits={GPU: "1", "nvidia.com/gpumem": "30000"}),
            pod(
                "small",
                limits={GPU: "1", "nvidia.com/gpumem": "8000"},
                annotations={"nvidia.com/vgpu-mode": "mig"},
            ),
        ):
            bound = await flow.schedule(spec)
            pods.append(bound)
            (container,) = decode_assignment(
                bound["metadata"]["annotations"]["xpushare.io/assignment"]
            ).containers
            (piece,) = container.devices
            places.append(piece.partition)
            assert fake.gi_count(0) == len(migs)  # nothing is made before kubelet admits it
            admitted = await flow.allocate(bound, [ContainerSpec("main", {GPU: 1})])
            envs = admitted["main"].envs
            (mig,) = envs["NVIDIA_VISIBLE_DEVICES"].split(",")
            assert mig.startswith("MIG-") and fake.alive(0, mig)
            assert not any(k.startswith("CUDA_DEVICE_MEMORY_LIMIT") for k in envs)
            migs.append(mig)
            await flow.handoff_served()
        assert places[0] == "3g.40gb@4"  # the smallest profile over 30000 MiB, 4g kept open
        assert places[1] is not None and places[1].startswith("1g.10gb@")

        # The node agent's metrics show each instance's memory under its pod's name.
        fake.mig_memory(0, migs[0], 12000)
        series = (
            f'xpushare_container_memory_used_bytes{{container="main",device="{uuid(0)}",'
            f'namespace="default",node="{NODE}",pod="big",vendor="nvidia"}}'
        )
        url = f"http://127.0.0.1:{flow.agent.agent.http_port}/metrics"

        def scraped() -> str:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode())

        async def served() -> bool:
            text = await asyncio.to_thread(scraped)
            return any(
                x.startswith(f"{series} ") and float(x.split()[-1]) == 12000 * 2**20
                for x in text.splitlines()
            )

        for _ in range(500):
            if await served():
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"not served: {series}")
        assert fake.gi_count(0) == 2 and migs[0] != migs[1]

        for bound in pods:
            await flow.delete(bound)
        await flow.api.wait_for(lambda: fake.gi_count(0) == 0, 10)
        assert not any(fake.alive(0, m) for m in migs)
    assert fake.thread_violations == 0


async def test_a_pod_naming_its_mig_profile_alone_is_placed_on_that_profile(
    fake: FakeNvml, driver_root: Path, hami_dir: Path
) -> None:
    """``nvidia.com/gpu: 1`` and the profile annotation are a whole request (the README's
    example): the profile says how big the instance is, so the webhook's whole-device default
    (compute 100, exclusive) must not be added, or /filter finds no 3g instance that holds
    100 % of the GPU's compute."""
    fake.add_gpus(1)
    fake.enable_mig(0)
    fake.mig_profiles(0, A100_40GB)
    config = {**base_config(driver_root, hami_dir), "mode": "mig"}
    async with PodFlow(
        nvidia_host(config), nvidia_host(config), vendor="nvidia", node_name=NODE
    ) as flow:
        await flow.kubelet.wait_until(lambda: flow.kubelet.allocatable(GPU) == 7, what="listed")
        spec = pod("named", limits={GPU: "1"}, annotations={"xpushare.io/mig-profile": "3g.20gb"})
        admitted = await flow.admit(spec)
        limits = admitted["spec"]["containers"][0]["resources"]["limits"]
        assert "nvidia.com/gpucores" not in limits, limits
        bound = await flow.schedule(spec)
        (container,) = decode_assignment(
            bound["metadata"]["annotations"]["xpushare.io/assignment"]
        ).containers
        (piece,) = container.devices
        assert piece.partition is not None and piece.partition.startswith("3g.20gb@")
        got = await flow.allocate(bound, [ContainerSpec("main", {GPU: 1})])
        (mig,) = got["main"].envs["NVIDIA_VISIBLE_DEVICES"].split(",")
        assert mig.startswith("MIG-") and fake.alive(0, mig)
        await flow.delete(bound)
    assert fake.thread_violations == 0

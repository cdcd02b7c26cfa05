"""The NVIDIA vendor served through DRA, end to end on the fake NVML (issue 18's NVIDIA flow).

The node agent runs in ``dra`` mode with this plugin: it detects the fake GPUs through the
real loading path, publishes them as a ResourceSlice of ``nvidia.xpushare.io``; a claim is
allocated from that slice as kube-scheduler writes it (a share of one GPU: consumed memory
and cores); the fake kubelet prepares it over the real DRA gRPC protocol and the CDI spec
carries HAMi-core's contract, through the same allocate hook as the device-plugin path; the
agent restarts in the middle; unprepare releases the HAMi-core directory through the release
hook, and nothing is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fake_nvml import FakeNvml, uuid
from kubernetes.client import ApiClient
from nvidia_kit import base_config

from xpushare.node import KubeClient
from xpushare.plugins import PluginHost
from xpushare.testing.apiserver import FakeApiServer
from xpushare.testing.claims import allocated_claim
from xpushare.testing.drakubelet import FakeDraKubelet
from xpushare.testing.hosts import vendor_host
from xpushare.testing.nodeagent import run_node_agent, short_socket_dir
from xpushare_nvidia import plugin

NODE = "gpu-node"
DRIVER = "nvidia.xpushare.io"


def nvidia_host(config: dict[str, Any]) -> PluginHost:
    return vendor_host("nvidia", plugin, config, node_name=NODE, strict=True)


async def eventually(check: Callable[[], Any], what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.01)


class Rig:
    """The fake API server with the node, and a fake DRA kubelet, for agents on *config*."""

    def __init__(self, api: FakeApiServer, kubelet: FakeDraKubelet, agent_config: dict[str, Any]):
        self.api, self.kubelet, self.agent_config = api, kubelet, agent_config

    @contextlib.asynccontextmanager
    async def agent(self, config: dict[str, Any]) -> AsyncIterator[None]:
        """A node agent in DRA mode with the NVIDIA plugin on *config*, registered."""
        client = KubeClient.for_host(NODE, self.api.url)
        try:
            sockets = self.agent_config["dra_plugins_dir"].parent
            async with run_node_agent(nvidia_host(config), client, sockets, **self.agent_config):
                await self.kubelet.wait_registered(DRIVER)
                await eventually(lambda: self.api.items("resourceslices"), "slices published")
                yield
        finally:
            client.close()


@contextlib.asynccontextmanager
async def dra_rig(tmp_path: Path, name: str) -> AsyncIterator[Rig]:
    with short_socket_dir(name) as sockets:
        agent_config = dict(
            mode="dra",
            plugins_registry_dir=sockets / "registry",
            dra_plugins_dir=sockets / "plugins",
            cdi_dir=tmp_path / "cdi",
            state_dir=tmp_path / "state",
        )
        async with FakeApiServer() as api:
            api.put("nodes", {"metadata": {"name": NODE, "uid": "node-uid"}})
            kubelet = FakeDraKubelet(sockets / "registry")
            await kubelet.start()
            try:
                yield Rig(api, kubelet, agent_config)
            finally:
                await kubelet.stop()


def by_uuid(slice_obj: dict[str, Any], gpu: str) -> dict[str, Any]:
    (device,) = [
        d for d in slice_obj["spec"]["devices"] if d["attributes"]["uuid"]["string"] == gpu
    ]
    return device


async def test_an_nvidia_share_through_dra_gets_hami_core_limits_and_leaves_nothing(
    fake: FakeNvml, driver_root: Path, hami_dir: Path, tmp_path: Path
) -> None:
    fake.add_gpus(2, numa=[0, 1])
    config = base_config(driver_root, hami_dir)
    async with dra_rig(tmp_path, "xnd") as rig:
        async with rig.agent(config):
            (slice_obj,) = rig.api.items("resourceslices")
            ApiClient()._ApiClient__deserialize(slice_obj, "V1ResourceSlice")
            assert slice_obj["spec"]["driver"] == DRIVER
            assert slice_obj["spec"]["nodeName"] == NODE
            assert len(slice_obj["spec"]["devices"]) == 2
            # What a claim selects by: the GPU's identity, its NUMA node (the standard
            # attribute) and its capacities, shareable by several claims.
            second = by_uuid(slice_obj, uuid(1))
            assert second["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 1}
            assert second["allowMultipleAllocations"] is True
            assert set(second["capacity"]) >= {"memory", "cores"}

            claim = allocated_claim(
                slice_obj, second["name"], memory="8Gi", cores="30", name="infer"
            )
            ApiClient()._ApiClient__deserialize(claim, "ResourceV1ResourceClaim")
            rig.api.put("resourceclaims", claim)
            uid = claim["metadata"]["uid"]
            ref = ("ml", "infer", uid)
            answer = await rig.kubelet.prepare(DRIVER, [ref])
            assert answer[uid].error == ""
            (device,) = answer[uid].devices
            assert device["device_name"] == second["name"]

            # HAMi-core's contract, as the device-plugin path gives it.
            (spec_file,) = (tmp_path / "cdi").glob("*.json")
            spec = json.loads(spec_file.read_text())
            (cdi,) = spec["devices"]
            assert device["cdi_device_ids"] == [f"{spec['kind']}={cdi['name']}"]
            edits = cdi["containerEdits"]
            env = dict(e.split("=", 1) for e in edits["env"])
            assert env["NVIDIA_VISIBLE_DEVICES"] == uuid(1)
            assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"
            assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
            assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/vgpu.cache"
            mounted = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
            assert mounted["/etc/ld.so.preload"] == "/usr/local/vgpu/ld.so.preload"
            assert any(p.endswith("libvgpu.so") for p in mounted)
            cache = mounted["/usr/local/vgpu"]
            assert cache.startswith("/usr/local/vgpu/containers/")
            # The GPU's device nodes come from NVIDIA's runtime, which reads
            # NVIDIA_VISIBLE_DEVICES, as on the device-plugin path.
            assert "deviceNodes" not in edits
            # The container's HAMi-core directory, on the node as the agent sees it.
            made = hami_dir / cache.removeprefix("/usr/local/vgpu/")
            assert made.is_dir()

        # The agent restarts (a DaemonSet update), and so does kubelet: the claim is
        # answered from the checkpoint, not allocated a second time.
        rig.kubelet.forget()
        async with rig.agent(config):
            again = await rig.kubelet.prepare(DRIVER, [ref])
            assert again[uid].devices == answer[uid].devices
            assert made.is_dir()
            gone = await rig.kubelet.unprepare(DRIVER, [ref])
            assert gone[uid].error == ""
            # The release hook removed the container's HAMi-core directory.
            assert not made.exists()
            assert list((tmp_path / "cdi").glob("*.json")) == []
            assert list((tmp_path / "state" / "dra" / "nvidia").glob("*.json")) == []
    assert fake.thread_violations == 0


async def test_with_cdi_names_the_claim_also_names_nvidias_own_cdi_device(
    fake: FakeNvml, driver_root: Path, hami_dir: Path, tmp_path: Path
) -> None:
    """``device_list_strategy: cdi``: kubelet gets NVIDIA's CDI device of the GPU (its device
    nodes, from ``nvidia-ctk cdi generate``) beside the claim's own (HAMi-core's limits)."""
    fake.add_gpus(1)
    config = {**base_config(driver_root, hami_dir), "device_list_strategy": "cdi"}
    async with dra_rig(tmp_path, "xnc") as rig, rig.agent(config):
        (slice_obj,) = rig.api.items("resourceslices")
        gpu = by_uuid(slice_obj, uuid(0))
        claim = allocated_claim(slice_obj, gpu["name"], memory="4Gi", cores="20", name="infer")
        rig.api.put("resourceclaims", claim)
        uid = claim["metadata"]["uid"]
        answer = await rig.kubelet.prepare(DRIVER, [("ml", "infer", uid)])
        assert answer[uid].error == ""
        (device,) = answer[uid].devices
        ours, theirs = device["cdi_device_ids"]
        assert ours.startswith(f"{DRIVER}/claim=")
        assert theirs == f"nvidia.com/gpu={uuid(0)}"
        (spec_file,) = (tmp_path / "cdi").glob("*.json")
        (cdi,) = json.loads(spec_file.read_text())["devices"]
        env = dict(e.split("=", 1) for e in cdi["containerEdits"]["env"])
        assert "NVIDIA_VISIBLE_DEVICES" not in env
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
        gone = await rig.kubelet.unprepare(DRIVER, [("ml", "infer", uid)])
        assert gone[uid].error == ""
    assert fake.thread_violations == 0

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


def container_cdi(devices: list[dict[str, Any]], request: str | None) -> list[str]:
    """The CDI names kubelet hands a container naming the claim (and *request*, if any):
    every device's for no request, else those whose request_names hold it (kubelet's
    ClaimInfo.cdiDevicesAsList), in the answer's order, each once."""
    names: list[str] = []
    for d in devices:
        if request is None or not d["request_names"] or request in d["request_names"]:
            names += [n for n in d["cdi_device_ids"] if n not in names]
    return names


def merged_edits(spec: dict[str, Any], names: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The env and mounts a container gets from CDI devices *names*; fails on a conflict (one
    variable or one container path given two values)."""
    by_name = {f"{spec['kind']}={d['name']}": d["containerEdits"] for d in spec["devices"]}
    env: dict[str, str] = {}
    mounts: dict[str, str] = {}
    for name in names:
        edits = by_name[name]
        for key, value in (e.split("=", 1) for e in edits.get("env", [])):
            assert env.setdefault(key, value) == value, f"{key}: {env[key]} and {value}"
        for m in edits.get("mounts", []):
            host = mounts.setdefault(m["containerPath"], m["hostPath"])
            assert host == m["hostPath"], f"{m['containerPath']}: {host} and {m['hostPath']}"
    return env, mounts


def two_request_claim(slice_obj: dict[str, Any]) -> dict[str, Any]:
    """Requests ``train`` (GPU 0, 6Gi, 20 %) and ``infer`` (GPU 1, 2Gi, 10 %), reserved for
    pod ml/trainer."""
    claim = allocated_claim(slice_obj, by_uuid(slice_obj, uuid(0))["name"], memory="6Gi",
                            cores="20", name="pair", pod="trainer")  # fmt: skip
    results = claim["status"]["allocation"]["devices"]["results"]
    results[0]["request"] = "train"
    second = {**results[0], "request": "infer", "device": by_uuid(slice_obj, uuid(1))["name"]}
    second["consumedCapacity"] = {"memory": "2Gi", "cores": "10"}
    second["shareID"] = "0b4a3f8e-8d7c-4e0a-9b1e-2f3a4b5c6d7e"
    results.append(second)
    claim["spec"]["devices"]["requests"] = [
        {**claim["spec"]["devices"]["requests"][0], "name": n} for n in ("train", "infer")
    ]
    return claim


def trainer_pod(claims: list[dict[str, Any]]) -> dict[str, Any]:
    main = {"name": "main", "image": "cuda", "resources": {"claims": claims}}
    spec = {"containers": [main], "resourceClaims": [{"name": "gpu", "resourceClaimName": "pair"}]}
    return {"metadata": {"name": "trainer", "namespace": "ml"}, "spec": spec}


async def test_a_container_taking_a_whole_two_request_claim_sees_both_gpus_with_their_limits(
    fake: FakeNvml, driver_root: Path, hami_dir: Path, tmp_path: Path
) -> None:
    """Kubelet hands a container that names the claim without a request every device's CDI
    names: they must add up to one view (one visible-devices list, indexed limits, one
    HAMi-core directory), as the device-plugin path gives a two-GPU container."""
    fake.add_gpus(2)
    config = base_config(driver_root, hami_dir)
    async with dra_rig(tmp_path, "xnw") as rig, rig.agent(config):
        (slice_obj,) = rig.api.items("resourceslices")
        claim = two_request_claim(slice_obj)
        ApiClient()._ApiClient__deserialize(claim, "ResourceV1ResourceClaim")
        rig.api.put("resourceclaims", claim)
        rig.api.put("pods", trainer_pod([{"name": "gpu"}]))
        uid = claim["metadata"]["uid"]
        answer = await rig.kubelet.prepare(DRIVER, [("ml", "pair", uid)])
        assert answer[uid].error == ""
        assert sorted(d["request_names"][0] for d in answer[uid].devices) == ["infer", "train"]
        (spec_file,) = (tmp_path / "cdi").glob("*.json")
        spec = json.loads(spec_file.read_text())
        env, mounts = merged_edits(spec, container_cdi(answer[uid].devices, None))
        assert env["NVIDIA_VISIBLE_DEVICES"] == f"{uuid(0)},{uuid(1)}"
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "6144m"
        assert env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "2048m"
        assert (env["CUDA_DEVICE_SM_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT_1"]) == ("20", "10")
        assert mounts["/usr/local/vgpu"].startswith("/usr/local/vgpu/containers/")
        gone = await rig.kubelet.unprepare(DRIVER, [("ml", "pair", uid)])
        assert gone[uid].error == ""
        assert list((tmp_path / "cdi").glob("*.json")) == []
    assert fake.thread_violations == 0


async def test_containers_naming_one_request_each_see_only_their_gpu(
    fake: FakeNvml, driver_root: Path, hami_dir: Path, tmp_path: Path
) -> None:
    fake.add_gpus(2)
    config = base_config(driver_root, hami_dir)
    async with dra_rig(tmp_path, "xnr") as rig, rig.agent(config):
        (slice_obj,) = rig.api.items("resourceslices")
        claim = two_request_claim(slice_obj)
        rig.api.put("resourceclaims", claim)
        rig.api.put("pods", trainer_pod([{"name": "gpu", "request": "infer"}]))
        uid = claim["metadata"]["uid"]
        answer = await rig.kubelet.prepare(DRIVER, [("ml", "pair", uid)])
        assert answer[uid].error == ""
        (spec_file,) = (tmp_path / "cdi").glob("*.json")
        spec = json.loads(spec_file.read_text())
        env, _ = merged_edits(spec, container_cdi(answer[uid].devices, "infer"))
        assert env["NVIDIA_VISIBLE_DEVICES"] == uuid(1)
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m"
        assert "CUDA_DEVICE_MEMORY_LIMIT_1" not in env
        gone = await rig.kubelet.unprepare(DRIVER, [("ml", "pair", uid)])
        assert gone[uid].error == ""
    assert fake.thread_violations == 0

"""An NVIDIA pod through the whole system, on the fake NVML: webhook, /filter, /bind, Allocate.

The same flow as the core's end-to-end test (tests/e2e/test_pod_flow.py), with this plugin
as the vendor on both sides: the node agent detects the fake GPUs through the real loading
path and publishes them; the scheduler places a two-GPU pod with this plugin's fit (an
NVLink pair); kubelet's Allocate gives the container HAMi-core's limits.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
from fake_nvml import FakeNvml, uuid
from nvidia_kit import base_config

from xpushare.codec import HANDOFF_KEY, decode_assignment
from xpushare.node import KubeClient, NodeAgent, NodeConfig
from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.scheduler import Scheduler, load_config
from xpushare.scheduler.kube import Kube, KubeSettings
from xpushare.testing.apiserver import FakeApiServer, node, pod
from xpushare.testing.kubelet import ContainerSpec, FakeKubelet
from xpushare_nvidia import plugin

NODE = "gpu-node"
GPU = "nvidia.com/gpu"


def nvidia_host(config: dict[str, Any]) -> PluginHost:
    host = PluginHost(
        HostSettings(strict=True),
        core_plugins=CORE_PLUGINS,
        node_name=NODE,
        vendor_config={"nvidia": config},
    )
    host.register("nvidia", plugin)
    return host


async def post(http: aiohttp.ClientSession, url: str, body: Any) -> Any:
    async with http.post(url, json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


def review(obj: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        },
    }


async def test_a_two_gpu_pod_gets_an_nvlink_pair_with_hami_core_limits(
    fake: FakeNvml, driver_root: Path, hami_dir: Path
) -> None:
    # Four GPUs; NVLink pairs 0-2 and 1-3, PCIe otherwise: a walk in index order (what the
    # core's default does on identical idle GPUs) would take 0 and 1, which share no NVLink.
    fake.add_gpus(4, numa=[0, 1, 0, 1])
    fake.nvlink(0, 2, 4)
    fake.nvlink(1, 3, 4)
    config = base_config(driver_root, hami_dir)
    plugin_dir = Path(tempfile.mkdtemp(prefix="xpne", dir="/tmp"))
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        api.put("nodes", node(NODE))
        agent_kube = KubeClient.for_host(NODE, api.url)
        agent_host = nvidia_host(config)
        agent = NodeAgent(
            NodeConfig(
                node_name=NODE,
                device_plugin_dir=plugin_dir,
                metrics_host="127.0.0.1",
                metrics_port=0,
                socket_poll_s=0.02,
                register_retry_s=0.02,
                health_wait_s=0.01,
                partition_lock_path=None,
            ),
            agent_host,
            agent_kube,
        )
        kubelet = FakeKubelet(plugin_dir, dial_timeout_s=5.0)
        await kubelet.start()
        agent_task = asyncio.create_task(agent.run())
        scheduler_config = load_config(
            environ={},
            overrides={
                "server.host": "127.0.0.1",
                "server.port": 0,
                "server.metrics_port": 0,
                "leader.enabled": False,
                "bind.wait_s": 3.0,
            },
        )
        sched_kube = await Kube.connect(KubeSettings(server=api.url))
        scheduler = Scheduler(scheduler_config, host=nvidia_host(config), kube=sched_kube)
        try:
            await kubelet.wait_until(lambda: kubelet.allocatable(GPU) == 40, what="registered")
            await api.wait_for(
                lambda: (
                    "xpushare.io/inventory-nvidia"
                    in api.get("nodes", NODE)["metadata"]["annotations"]
                ),
                10,
            )
            await scheduler.start()
            await scheduler.wait_synced(10)
            url = f"http://127.0.0.1:{scheduler.ports['main']}"

            # The webhook admits a HAMi-style pod spec; /filter and /bind place it.
            obj = pod(
                "train",
                limits={GPU: "2", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"},
            )
            answer = (await post(http, f"{url}/mutate", review(obj)))["response"]
            assert answer["allowed"], answer
            if "patch" in answer:
                patch = json.loads(base64.b64decode(answer["patch"]))
                obj = jsonpatch.apply_patch(obj, patch)
            created = api.put("pods", obj)
            await api.wait_for(lambda: scheduler.cluster.synced, 5)
            found = await post(
                http, f"{url}/filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]}
            )
            assert found["NodeNames"] == [NODE], found
            meta = created["metadata"]
            bind = {
                "PodName": meta["name"],
                "PodNamespace": "default",
                "PodUID": meta.get("uid", ""),
                "Node": NODE,
            }
            assert (await post(http, f"{url}/bind", bind)).get("Error", "") == ""
            bound = api.get("pods", "train", "default")
            assignment = decode_assignment(
                bound["metadata"]["annotations"]["xpushare.io/assignment"]
            )
            (container,) = assignment.containers
            chosen = {s.device_id for s in container.devices}
            assert chosen in ({uuid(0), uuid(2)}, {uuid(1), uuid(3)}), "an NVLink pair"

            # kubelet admits it: the container gets HAMi-core's contract.
            admitted = await kubelet.admit_pod(meta["uid"], [ContainerSpec("main", {GPU: 2})])
            envs = admitted["main"].envs
            assert set(envs["NVIDIA_VISIBLE_DEVICES"].split(",")) == chosen
            for i in (0, 1):
                assert envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] == "8000m"
                assert envs[f"CUDA_DEVICE_SM_LIMIT_{i}"] == "30"
            assert envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/vgpu.cache"
            assert "/etc/ld.so.preload" in admitted["main"].mounts
            await api.wait_for(
                lambda: HANDOFF_KEY not in api.get("nodes", NODE)["metadata"]["annotations"], 5
            )
        finally:
            with contextlib.suppress(Exception):
                await scheduler.stop()
            await sched_kube.close()
            await agent.stop()
            with contextlib.suppress(Exception):
                await agent_task
            await kubelet.stop()
            agent_kube.close()
            agent_host.close()
            shutil.rmtree(plugin_dir, ignore_errors=True)
    assert fake.thread_violations == 0

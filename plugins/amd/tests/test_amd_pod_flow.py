"""The whole pod flow with AMD GPUs on a fake libamd_smi.

webhook → /filter → /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the AMD inventory it detected through the
plugin, and the fake kubelet admitting the pod over the device-plugin gRPC API: the
container gets the render node of the GPU the scheduler chose, and ``/dev/kfd``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from amd_fakes import GIB, amd_host, build_library, mi300x

import xpushare_amd.plugin
from xpushare.node import NodeAgent, NodeConfig
from xpushare.node.kube import KubeClient
from xpushare.node.tasks import TaskFailed
from xpushare.plugins import PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.scheduler import Scheduler, load_config
from xpushare.scheduler.kube import Kube, KubeSettings
from xpushare.testing.apiserver import FakeApiServer, json_patch, node, pod
from xpushare.testing.kubelet import ContainerSpec, FakeKubelet

NODE = "node-a"
GPU = "amd.com/gpu"


@pytest.fixture
def plugin_dir() -> Any:
    # Not tmp_path: a unix socket path has at most 107 bytes and pytest's are long.
    path = Path(tempfile.mkdtemp(prefix="xpa", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def api() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer() as server:
        yield server


def _scheduler_host() -> PluginHost:
    host = PluginHost(core_plugins=CORE_PLUGINS)
    host.register("amd", xpushare_amd.plugin)
    return host


async def _review(http: aiohttp.ClientSession, url: str, obj: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "review-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "default",
            "object": obj,
        },
    }
    async with http.post(f"{url}/mutate", json=body) as response:
        assert response.status == 200, await response.text()
        answer = (await response.json())["response"]
    assert answer["allowed"], answer
    patch = json.loads(base64.b64decode(answer.get("patch", "W10=")))
    return json_patch(obj, patch)


async def _post(http: aiohttp.ClientSession, url: str, verb: str, body: Any) -> Any:
    async with http.post(f"{url}/{verb}", json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def test_a_pod_asking_for_a_share_of_an_amd_gpu_runs_on_the_chosen_gpu(
    api: FakeApiServer, plugin_dir: Path, tmp_path: Path
) -> None:
    api.put("nodes", node(NODE))
    lib = build_library(tmp_path / "rocm", [mi300x(0), mi300x(1, vram_used=GIB)])
    node_host = amd_host(lib, node=NODE)
    kubelet = FakeKubelet(plugin_dir, dial_timeout_s=2.0)
    await kubelet.start()
    config = NodeConfig(
        node_name=NODE,
        device_plugin_dir=plugin_dir,
        metrics_host="127.0.0.1",
        metrics_port=0,
        detect_interval_s=30.0,
        monitor_interval_s=0.05,
        health_interval_s=0.05,
        health_wait_s=0.01,
        reconcile_interval_s=30.0,
        socket_poll_s=0.01,
        register_retry_s=0.01,
        register_timeout_s=2.0,
        allocate_deadline_s=2.0,
        partition_lock_path=None,
    )
    agent = NodeAgent(config, node_host, KubeClient.for_host(NODE, api.url))
    agent_task = asyncio.create_task(agent.run())
    sched_kube = await Kube.connect(KubeSettings(server=api.url))
    settings = {
        "server.host": "127.0.0.1",
        "server.port": 0,
        "server.metrics_port": 0,
        "leader.enabled": False,
        "bind.wait_s": 3.0,
        "bind.repair_interval_s": 0.05,
    }
    scheduler = Scheduler(
        load_config(environ={}, overrides=settings), host=_scheduler_host(), kube=sched_kube
    )
    try:
        await kubelet.wait_until(
            lambda: kubelet.registered(GPU) and kubelet.updates(GPU) > 0,
            what=f"{GPU} registered and listed",
        )
        await api.wait_for(
            lambda: (
                "xpushare.io/inventory-amd"
                in (api.get("nodes", NODE) or {})["metadata"].get("annotations", {})
            ),
            5.0,
        )
        await scheduler.start()
        await scheduler.wait_synced(10)
        url = f"http://127.0.0.1:{scheduler.ports['main']}"
        async with aiohttp.ClientSession() as http:
            wanted = pod(
                "infer",
                limits={GPU: "1", "amd.com/gpumem": "16384", "amd.com/gpucores": "25"},
                annotations={"amd.com/use-gpu-uuid": "e0ff74a1-0000-1000-8000-4d3a0f9e1201"},
            )
            admitted = await _review(http, url, wanted)
            created = api.put("pods", admitted)
            filtered = await _post(
                http, url, "filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]}
            )
            assert filtered["NodeNames"] == [NODE], filtered
            meta = created["metadata"]
            bound = await _post(
                http,
                url,
                "bind",
                {
                    "PodName": meta["name"],
                    "PodNamespace": "default",
                    "PodUID": meta["uid"],
                    "Node": NODE,
                },
            )
            assert not bound.get("Error"), bound
        result = await kubelet.admit_pod(meta["uid"], [ContainerSpec("main", {GPU: 1})])
        main = result["main"]
        chosen = "GPU-4d3a0f9e12ab5501"  # the one the UUID annotation allows
        assert main.envs["XPUSHARE_AMD_DEVICES"] == chosen
        assert main.envs["ROCR_VISIBLE_DEVICES"] == "0"
        assert main.envs["XPUSHARE_AMD_MEMORY_LIMIT_0"] == "16384"
        assert main.envs["XPUSHARE_AMD_COMPUTE_UNITS_0"] == "76"  # 25 % of 304 CUs
        assert main.device_specs == {
            "/dev/kfd": ("/dev/kfd", "rw"),
            "/dev/dri/renderD129": ("/dev/dri/renderD129", "rw"),
            "/dev/dri/card1": ("/dev/dri/card1", "rw"),
        }
    finally:
        await scheduler.stop()
        await sched_kube.close()
        await agent.stop()
        with contextlib.suppress(TaskFailed):
            await agent_task
        await kubelet.stop()
        node_host.close()

"""One pod through the whole system: webhook, /filter, /bind, kubelet's Allocate, deletion.

The scheduler (extender and webhook) and the node agent run as they do in a cluster, each
with the real ``kubernetes`` client against one fake API server; kubelet is the fake kubelet
speaking the device-plugin gRPC API to the node agent over unix sockets. Nothing is written
by hand: the node agent publishes the inventory the scheduler places by, /bind writes the
assignment and the handoff, Allocate reads them and releases the handoff.
"""

import asyncio
import base64
import contextlib
import json
import shutil
import tempfile
from pathlib import Path

import aiohttp
import jsonpatch

from xpushare.codec import HANDOFF_KEY, decode_assignment
from xpushare.node import KubeClient, NodeAgent, NodeConfig
from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS, mock
from xpushare.scheduler import Scheduler, load_config
from xpushare.scheduler.kube import Kube, KubeSettings
from xpushare.testing.apiserver import FakeApiServer, node, pod
from xpushare.testing.kubelet import ContainerSpec, FakeKubelet

NODE = "gpu-node"
GPU = "xpushare.io/mock-gpu"
MEM = "xpushare.io/mock-gpumem"


def host() -> PluginHost:
    h = PluginHost(
        HostSettings(strict=True),
        core_plugins=CORE_PLUGINS,
        node_name=NODE,
        vendor_config={"mock": {"devices": "1x A100-80GB"}},
    )
    h.register("mock", mock)
    return h


async def post(http, url, body):
    async with http.post(url, json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


def review(obj):
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


async def admit_and_create(http, url, api, name, memory):
    obj = pod(name, limits={GPU: "1", MEM: str(memory)})
    response = (await post(http, f"{url}/mutate", review(obj)))["response"]
    assert response["allowed"], response
    if "patch" in response:
        obj = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
    return api.put("pods", obj)


def filter_args(obj):
    return {"Pod": obj, "Nodes": None, "NodeNames": [NODE]}


async def test_a_pod_flows_from_webhook_to_allocate_and_gives_its_share_back():
    plugin_dir = Path(tempfile.mkdtemp(prefix="xpe", dir="/tmp"))
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        api.put("nodes", node(NODE))
        # The node agent: publishes the inventory, serves kubelet.
        agent_kube = KubeClient.for_host(NODE, api.url)
        agent_host = host()
        agent = NodeAgent(
            NodeConfig(
                node_name=NODE,
                device_plugin_dir=plugin_dir,
                metrics_host="127.0.0.1",
                metrics_port=0,
                socket_poll_s=0.02,
                register_retry_s=0.02,
                partition_lock_path=None,
            ),
            agent_host,
            agent_kube,
        )
        kubelet = FakeKubelet(plugin_dir, dial_timeout_s=5.0)
        await kubelet.start()
        agent_task = asyncio.create_task(agent.run())
        # The scheduler: extender and webhook.
        config = load_config(
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
        scheduler = Scheduler(config, host=host(), kube=sched_kube)
        try:
            await kubelet.wait_until(lambda: kubelet.allocatable(GPU) == 10, what="registered")
            await api.wait_for(
                lambda: (
                    "xpushare.io/inventory-mock"
                    in api.get("nodes", NODE)["metadata"]["annotations"]
                ),
                10,
            )
            await scheduler.start()
            await scheduler.wait_synced(10)
            url = f"http://127.0.0.1:{scheduler.ports['main']}"

            # 1. The webhook admits the pod; /filter finds the node; /bind places it.
            first = await admit_and_create(http, url, api, "train", 80 * 1024)
            assert first["spec"].get("schedulerName")
            await api.wait_for(lambda: scheduler.cluster.synced, 5)
            result = await post(http, f"{url}/filter", filter_args(first))
            assert result["NodeNames"] == [NODE], result
            meta = first["metadata"]
            bind = {
                "PodName": meta["name"],
                "PodNamespace": "default",
                "PodUID": meta.get("uid", ""),
                "Node": NODE,
            }
            assert (await post(http, f"{url}/bind", bind)).get("Error", "") == ""
            bound = api.get("pods", "train", "default")
            assert bound["spec"]["nodeName"] == NODE
            assignment = decode_assignment(
                bound["metadata"]["annotations"]["xpushare.io/assignment"]
            )
            assert HANDOFF_KEY in api.get("nodes", NODE)["metadata"]["annotations"]

            # 2. kubelet admits it: Allocate gives the container its assignment.
            limits = bound["spec"]["containers"][0]["resources"]["limits"]
            admitted = await kubelet.admit_pod(
                meta["uid"], [ContainerSpec("main", {GPU: int(limits[GPU])})]
            )
            envs = admitted["main"].envs
            device = assignment.containers[0].devices[0]
            assert envs["XPUSHARE_MOCK_VISIBLE_DEVICES"] == device.device_id
            assert envs["XPUSHARE_MOCK_MEMORY_LIMIT_0"] == f"{device.memory_mib}m"
            assert device.memory_mib == 80 * 1024
            # 3. The handoff is released.
            await api.wait_for(
                lambda: HANDOFF_KEY not in api.get("nodes", NODE)["metadata"]["annotations"], 5
            )

            # 4. The device is full: a second such pod does not fit...
            second = await admit_and_create(http, url, api, "eval", 80 * 1024)
            await asyncio.sleep(0.2)
            result = await post(http, f"{url}/filter", filter_args(second))
            assert not result["NodeNames"], result
            # ...until the first pod is deleted and its share is given back.
            api.delete("pods", "train", "default")
            kubelet.remove_pod(meta["uid"])

            async def fits() -> bool:
                result = await post(http, f"{url}/filter", filter_args(second))
                return result["NodeNames"] == [NODE]

            for _ in range(200):
                if await fits():
                    break
                await asyncio.sleep(0.02)
            assert await fits()
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

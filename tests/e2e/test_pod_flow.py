"""One pod through the whole system: webhook, /filter, /bind, kubelet's Allocate, deletion.

The scheduler (extender and webhook) and the node agent run as they do in a cluster, each
with the real ``kubernetes`` client against one fake API server; kubelet is the fake kubelet
speaking the device-plugin gRPC API to the node agent over unix sockets. Nothing is written
by hand: the node agent publishes the inventory the scheduler places by, /bind writes the
assignment and the handoff, Allocate reads them; kubelet admits the pod, which frees the handoff.
"""

import asyncio

from xpushare.codec import HANDOFF_KEY, decode_assignment
from xpushare.plugins import PluginHost
from xpushare.plugins.builtin import mock
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.podflow import PodFlow

NODE = "gpu-node"
GPU = "xpushare.io/mock-gpu"
MEM = "xpushare.io/mock-gpumem"


def host() -> PluginHost:
    return vendor_host("mock", mock, {"devices": "1x A100-80GB"}, node_name=NODE, strict=True)


async def test_a_pod_flows_from_webhook_to_allocate_and_gives_its_share_back() -> None:
    async with PodFlow(host(), host(), vendor="mock", node_name=NODE) as flow:
        assert flow.resource == GPU
        await flow.kubelet.wait_until(lambda: flow.kubelet.allocatable(GPU) == 10, what="listed")

        # 1. The webhook admits the pod; /filter finds the node; /bind places it.
        bound = await flow.schedule(pod("train", limits={GPU: "1", MEM: str(80 * 1024)}))
        assert bound["spec"].get("schedulerName")
        assert bound["spec"]["nodeName"] == NODE
        assignment = decode_assignment(bound["metadata"]["annotations"]["xpushare.io/assignment"])
        assert HANDOFF_KEY in flow.handoff_annotations()

        # 2. kubelet admits it (the container's device-plugin limits, as kubelet reads them):
        # Allocate gives the container its assignment.
        admitted = await flow.allocate(bound)
        assert {r: len(ids) for r, ids in admitted["main"].devices.items()} == {GPU: 1}
        envs = admitted["main"].envs
        device = assignment.containers[0].devices[0]
        assert envs["XPUSHARE_MOCK_VISIBLE_DEVICES"] == device.device_id
        assert envs["XPUSHARE_MOCK_MEMORY_LIMIT_0"] == f"{device.memory_mib}m"
        assert device.memory_mib == 80 * 1024
        # 3. The handoff has served: kubelet admitted the pod (the agent wrote nothing back).
        await flow.handoff_served()

        # 4. The device is full: a second such pod does not fit...
        second = flow.create(await flow.admit(pod("eval", limits={GPU: "1", MEM: str(80 * 1024)})))
        await asyncio.sleep(0.2)
        result = await flow.filter(second)
        assert not result["NodeNames"], result
        # ...until the first pod is deleted and its share is given back.
        await flow.delete(bound)

        async def fits() -> bool:
            result = await flow.filter(second)
            return bool(result["NodeNames"] == [NODE])

        for _ in range(200):
            if await fits():
                break
            await asyncio.sleep(0.02)
        assert await fits()

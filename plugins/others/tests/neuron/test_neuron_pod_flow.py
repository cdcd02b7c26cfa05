"""The whole pod flow with AWS Neuron devices on a fake host's sysfs tree.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the devices it read from sysfs, and the fake
kubelet admitting the pod over the device-plugin gRPC API. Pods HAMi placed (its
``hami.io/aws-neuron-devices-allocated`` string, the core mask as its cores) are counted, a
core request gets the device count kubelet needs from the webhook, and deleting a pod gives
its share back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuron_fakes import neuron_host, node_settings
from others_podflow import refused_then_fits_after_delete

from xpushare.plugins import PluginHost
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.podflow import PodFlow
from xpushare_others.neuron import plugin

NODE = "node-a"
DEV = "aws.amazon.com/neuron"
CORE = "aws.amazon.com/neuroncore"
HAMI_KEY = "hami.io/aws-neuron-devices-allocated"


def _flow(root: Path) -> PodFlow:
    node: PluginHost = vendor_host("awsneuron", plugin, node_settings(root), node_name=NODE)
    scheduler: PluginHost = vendor_host("awsneuron", plugin, node_name=None)
    return PodFlow(
        node, scheduler, vendor="awsneuron", scheduler_settings={"bind.repair_interval_s": 0.05}
    )


def _hami_pod(name: str, devices: str, limits: dict[str, str]) -> dict[str, Any]:
    return pod(
        name, limits=limits, annotations={HAMI_KEY: devices}, node_name=NODE, phase="Running"
    )


async def test_a_neuroncore_goes_from_the_webhook_to_the_kubelet_and_back(tmp_path: Path) -> None:
    root = neuron_host(tmp_path / "host", 1, cores=2)
    async with _flow(root) as flow:
        assert flow.resource == DEV
        # HAMi gave core 0 of the device (mask 1) to a running pod.
        flow.api.put(
            "pods", _hami_pod("from-hami", f"{NODE}-AWSNeuron-0,AWSNeuron,0,1:;", {CORE: "1"})
        )
        first = await flow.schedule(pod("infer", limits={CORE: "1"}))
        limits = first["spec"]["containers"][0]["resources"]["limits"]
        assert limits[DEV] == "1"  # the webhook asks kubelet for the device share
        annotations = first["metadata"]["annotations"]
        assert annotations["AWS_NEURON_IDS"] == "1"
        assert annotations["NEURON_RESOURCE_TYPE"] == CORE
        main = (await flow.allocate(first))["main"]
        assert main.envs["NEURON_RT_VISIBLE_CORES"] == "1"
        assert main.envs["AWS_NEURON_VISIBLE_DEVICES"] == "0"
        assert main.device_specs == {"/dev/neuron0": ("/dev/neuron0", "rw")}
        await flow.handoff_served()

        # Both cores are taken (HAMi's and ours): another core fits once ours is given back.
        again = await refused_then_fits_after_delete(flow, first, pod("again", limits={CORE: "1"}))
        assert (await flow.allocate(again))["main"].envs["NEURON_RT_VISIBLE_CORES"] == "1"
        await flow.handoff_served()


async def test_whole_devices_take_an_aligned_block(tmp_path: Path) -> None:
    root = neuron_host(tmp_path / "host", 8, cores=2, instance_type="trn1.32xlarge")
    async with _flow(root) as flow:
        # HAMi placed a whole device (mask 3) on device 1: the block 0-3 is broken.
        flow.api.put(
            "pods", _hami_pod("from-hami", f"{NODE}-AWSNeuron-1,AWSNeuron,0,3:;", {DEV: "1"})
        )
        first = await flow.schedule(pod("train", limits={DEV: "4"}))
        assert first["metadata"]["annotations"]["AWS_NEURON_IDS"] == "4,5,6,7"
        main = (await flow.allocate(first))["main"]
        assert main.envs["NEURON_RT_VISIBLE_CORES"] == "8,9,10,11,12,13,14,15"
        assert main.envs["AWS_NEURON_VISIBLE_DEVICES"] == "4,5,6,7"
        assert set(main.device_specs) == {f"/dev/neuron{i}" for i in range(4, 8)}
        await flow.handoff_served()

        again = await refused_then_fits_after_delete(flow, first, pod("again", limits={DEV: "4"}))
        assert again["metadata"]["annotations"]["AWS_NEURON_IDS"] == "4,5,6,7"
        await flow.allocate(again)
        await flow.handoff_served()

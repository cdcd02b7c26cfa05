"""The whole pod flow with Kunlun XPUs on the fake XPUML library, whole and as vXPUs.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the XPUs it detected through the plugin, and
the fake kubelet admitting the pod over the device-plugin gRPC API. A pod HAMi placed on XPUs
0-3 (its ``hami.io/kunlun-allocated`` string) is counted, so a pod asking four whole XPUs gets
the other half of the board; a vXPU pod's memory is rounded to a slice by the webhook; and
deleting a pod gives its XPUs back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kunlun_fakes import host_tree, node_settings, xpu
from others_podflow import refused_then_fits_after_delete

from xpushare.plugins import PluginHost
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.podflow import PodFlow
from xpushare_others.kunlun import plugin

NODE = "node-a"
XPU = "kunlunxin.com/xpu"
VXPU = "kunlunxin.com/vxpu"
VMEM = "kunlunxin.com/vxpu-memory"


def _hosts(vendor: str, settings: dict[str, Any]) -> tuple[PluginHost, PluginHost]:
    obj = plugin.vxpu if vendor == "kunlun-vxpu" else plugin.xpu
    return vendor_host(vendor, obj, settings, node_name=NODE), vendor_host(
        vendor, obj, node_name=None
    )


def _hami_pod(name: str, indices: range) -> dict[str, Any]:
    """A running pod HAMi placed on whole XPUs: its allocation string, bound to the node."""
    devices = "".join(f"{NODE}-kunlun-{i},kunlun,98304,100:" for i in indices)
    return pod(
        name,
        limits={XPU: str(len(indices))},
        annotations={"hami.io/kunlun-allocated": devices + ";"},
        node_name=NODE,
        phase="Running",
    )


async def test_whole_xpus_go_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any], xpuml_lib: Path, tmp_path: Path
) -> None:
    table_for("FAKE_XPUML_TABLE").write(*(xpu(i) for i in range(8)))
    root = host_tree(tmp_path / "host", 8)
    node, scheduler = _hosts("kunlun", node_settings(xpuml_lib, root))
    flow = PodFlow(
        node, scheduler, vendor="kunlun", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    async with flow:
        assert flow.resource == XPU
        flow.api.put("pods", _hami_pod("from-hami", range(4)))
        first = await flow.schedule(pod("train", limits={XPU: "4"}))
        annotations = first["metadata"]["annotations"]
        assert annotations["BAIDU_COM_DEVICE_IDX"] == "4,5,6,7"
        main = (await flow.allocate(first))["main"]
        assert main.envs["XPU_VISIBLE_DEVICES"] == "4,5,6,7"
        assert main.device_specs == {
            p: (p, "rw")
            for p in ("/dev/xpuctrl", "/dev/xpu4", "/dev/xpu5", "/dev/xpu6", "/dev/xpu7")
        }
        await flow.handoff_served()

        again = await refused_then_fits_after_delete(flow, first, pod("again", limits={XPU: "4"}))
        assert again["metadata"]["annotations"]["BAIDU_COM_DEVICE_IDX"] == "4,5,6,7"
        allocated = (await flow.allocate(again))["main"]
        assert allocated.envs["XPU_VISIBLE_DEVICES"] == "4,5,6,7"
        await flow.handoff_served()


async def test_a_vxpu_slice_goes_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any], xpuml_lib: Path, tmp_path: Path
) -> None:
    table_for("FAKE_XPUML_TABLE").write(xpu(0))
    root = host_tree(tmp_path / "host", 1)
    node, scheduler = _hosts("kunlun-vxpu", node_settings(xpuml_lib, root, mode="vxpu"))
    flow = PodFlow(
        node, scheduler, vendor="kunlun-vxpu", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    async with flow:
        assert flow.resource == VXPU
        first = await flow.schedule(pod("infer", limits={VXPU: "1", VMEM: "30000"}))
        limits = first["spec"]["containers"][0]["resources"]["limits"]
        assert limits[VMEM] == "49152"  # rounded to a slice by the webhook, as HAMi does
        main = (await flow.allocate(first))["main"]
        assert main.envs["XPU_VISIBLE_DEVICES"] == "0"
        assert main.envs["XPUSHARE_KUNLUN_VXPU_MEMORY_MIB"] == "49152"
        assert main.device_specs == {p: (p, "rw") for p in ("/dev/xpuctrl", "/dev/xpu0")}
        await flow.handoff_served()

        # A 24576 slice cannot share an XPU holding a 49152 one; it fits once that is gone.
        second = await refused_then_fits_after_delete(
            flow, first, pod("small", limits={VXPU: "1", VMEM: "24576"})
        )
        small = (await flow.allocate(second))["main"]
        assert small.envs["XPUSHARE_KUNLUN_VXPU_MEMORY_MIB"] == "24576"
        await flow.handoff_served()

"""The whole pod flow with Ascend NPUs on the fake libdcmi.so.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the Ascend inventory it detected through the
plugin, and the fake kubelet admitting the pods over the device-plugin gRPC API: a vNPU pod
gets its chip and template for Ascend Docker Runtime, a whole-NPU pod gets the chip's device
nodes, and a pod no chip can hold is refused at admission with the templates listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascend_fakes import FakeTable, chip_line

import xpushare_ascend.plugin as ascend_plugin
from xpushare.plugins import PluginHost
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.kubelet import ContainerSpec
from xpushare.testing.podflow import PodFlow

NODE = "node-a"
NPU = "huawei.com/Ascend910B3"
MEM = "huawei.com/Ascend910B3-memory"


def _host(**vendor_config: Any) -> PluginHost:
    return vendor_host(
        "ascend", ascend_plugin, vendor_config, node_name=NODE, distribution="xpushare-ascend"
    )


async def test_ascend_pods_go_from_the_webhook_to_the_kubelet(
    table: FakeTable, fake_lib: Path, tmp_path: Path
) -> None:
    table.chips(chip_line(0, phy=2), chip_line(1, phy=3))
    flow = PodFlow(
        _host(library_path=str(fake_lib), sysfs_root=str(tmp_path / "sys")),
        _host(),
        vendor="ascend",
        node_name=NODE,
        scheduler_settings={"bind.repair_interval_s": 0.05},
    )
    async with flow:
        assert flow.resource == NPU
        # No 910B3 can hold 70000 MiB: refused at admission, templates listed.
        refused = await flow.review(pod("huge", limits={NPU: "1", MEM: "70000"}))
        assert not refused["allowed"]
        message = refused["status"]["message"]
        assert "vir05_1c_16g (16384 MiB), vir10_3c_32g (32768 MiB)" in message

        vnpu = await flow.schedule(pod("infer", limits={NPU: "1", MEM: "12000"}))
        # The webhook wrote the template's size into the pod.
        limits = vnpu["spec"]["containers"][0]["resources"]["limits"]
        assert limits[MEM] == "16384"
        admitted = await flow.allocate(vnpu, [ContainerSpec("main", {NPU: 1})])
        first = admitted["main"]
        assert first.envs["ASCEND_VNPU_SPECS"] == "vir05_1c_16g"
        vnpu_chip = first.envs["ASCEND_VISIBLE_DEVICES"]
        assert vnpu_chip in {"2", "3"}
        assert not any(p.startswith("/dev/davinci") for p in first.device_specs)

        # One node's handoff serves one pod at a time: bind the next after Allocate.
        whole = await flow.schedule(pod("train", limits={NPU: "1"}))
        admitted = await flow.allocate(whole, [ContainerSpec("main", {NPU: 1})])
        second = admitted["main"]
        # The whole NPU is the chip the vNPU did not take.
        other = ({"2", "3"} - {vnpu_chip}).pop()
        assert second.envs["ASCEND_VISIBLE_DEVICES"] == other
        assert second.device_specs[f"/dev/davinci{other}"] == (f"/dev/davinci{other}", "rw")
        assert second.device_specs["/dev/davinci_manager"] == ("/dev/davinci_manager", "rw")
        assert "ASCEND_VNPU_SPECS" not in second.envs

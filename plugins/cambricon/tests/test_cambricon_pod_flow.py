"""The whole pod flow with Cambricon MLUs on the fake libcndev.so.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the Cambricon inventory it detected through
the plugin, and the fake kubelet admitting the pods over the device-plugin gRPC API: a pod
asking for a share in HAMi's units gets an sMLU instance made with its quota on the chosen
card, a whole-card pod gets the other card's nodes, and a share of two cards is refused at
admission.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cambricon_fakes import FakeTable, card_line

import xpushare_cambricon.plugin as cambricon_plugin
from xpushare.plugins import PluginHost
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.kubelet import ContainerSpec
from xpushare.testing.podflow import PodFlow

NODE = "node-a"
MLU = "cambricon.com/vmlu"
MEM = "cambricon.com/mlu.smlu.vmemory"
CORE = "cambricon.com/mlu.smlu.vcore"


def _host(**vendor_config: Any) -> PluginHost:
    return vendor_host(
        "cambricon",
        cambricon_plugin,
        vendor_config,
        node_name=NODE,
        distribution="xpushare-cambricon",
    )


async def test_cambricon_pods_go_from_the_webhook_to_the_kubelet(
    table: FakeTable, fake_lib: Path, tmp_path: Path
) -> None:
    table.cards(card_line(0), card_line(1))
    flow = PodFlow(
        _host(library_path=str(fake_lib), sysfs_root=str(tmp_path / "sys")),
        _host(),
        vendor="cambricon",
        node_name=NODE,
        scheduler_settings={"bind.repair_interval_s": 0.05},
    )
    async with flow:
        assert flow.resource == MLU
        refused = await flow.review(pod("wide", limits={MLU: "2", MEM: "16", CORE: "50"}))
        assert not refused["allowed"]
        assert "a share is part of one MLU" in refused["status"]["message"]

        # 16 units of 256 MiB and a quarter of the card's compute.
        share = await flow.schedule(
            pod(
                "infer",
                limits={MLU: "1", MEM: "16", CORE: "25"},
                annotations={
                    "cambricon.com/use-gpuuuid": "MLU-01001012-1916-0000-0000-000000000000"
                },
            )
        )
        admitted = await flow.allocate(share, [ContainerSpec("main", {MLU: 1})])
        first = admitted["main"]
        assert first.device_specs["/dev/cambricon_dev1"] == ("/dev/cambricon_dev1", "rw")
        assert "/dev/cambricon-caps/cap_dev1_mi1" in first.device_specs
        assert "/dev/cambricon_dev0" not in first.device_specs
        assert table.lines("profile") == [f"profile card=1 id=0 quota=25 mem={4096 << 20}"]

        # One node's handoff serves one pod at a time: bind the next after Allocate.
        whole = await flow.schedule(pod("train", limits={MLU: "1"}))
        admitted = await flow.allocate(whole, [ContainerSpec("main", {MLU: 1})])
        second = admitted["main"]
        # The whole card is the one the share did not take.
        assert second.envs["CAMBRICON_VISIBLE_DEVICES"] == "0"
        assert second.device_specs["/dev/cambricon_dev0"] == ("/dev/cambricon_dev0", "rw")
        assert len(table.lines("instance")) == 1

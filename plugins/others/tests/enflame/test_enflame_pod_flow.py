"""The whole pod flow with Enflame GCUs on the fake EFML library, whole and as DRS partitions.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the GCUs it detected through the plugin, and
the fake kubelet admitting the pod over the device-plugin gRPC API. Pods HAMi placed (its
``hami.io/enflame-*`` device strings) are counted, a DRS pod's slice count is kept by the
webhook while kubelet is asked for one share, and deleting a pod gives its share back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from enflame_fakes import FakeEfsmi, gcu, host_tree, node_settings
from others_podflow import refused_then_fits_after_delete

from xpushare.plugins import PluginHost
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.podflow import PodFlow
from xpushare_others.enflame import plugin

NODE = "node-a"
GCU = "enflame.com/gcu"
DRS = "enflame.com/drs-gcu"


def _hosts(vendor: str, settings: dict[str, Any]) -> tuple[PluginHost, PluginHost]:
    obj = plugin.drs if vendor == "enflame-drs" else plugin.gcu
    return vendor_host(vendor, obj, settings, node_name=NODE), vendor_host(
        vendor, obj, node_name=None
    )


def _hami_pod(name: str, key: str, devices: str, limits: dict[str, str]) -> dict[str, Any]:
    """A running pod HAMi placed: its device string, bound to the node."""
    return pod(name, limits=limits, annotations={key: devices}, node_name=NODE, phase="Running")


async def test_whole_gcus_go_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any], efml_lib: Path, tmp_path: Path
) -> None:
    table_for("FAKE_EFML_TABLE").write(*(gcu(i) for i in range(4)))
    root = host_tree(tmp_path / "host", 4)
    node, scheduler = _hosts("enflame", node_settings(efml_lib, root))
    flow = PodFlow(
        node, scheduler, vendor="enflame", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    async with flow:
        assert flow.resource == GCU
        hami = f"{NODE}-GCU-0,GCU,100,100:{NODE}-GCU-1,GCU,100,100:;"
        flow.api.put(
            "pods",
            _hami_pod("from-hami", "hami.io/enflame-gcu-devices-allocated", hami, {GCU: "2"}),
        )
        first = await flow.schedule(pod("train", limits={GCU: "2"}))
        main = (await flow.allocate(first))["main"]
        assert sorted(main.envs["ENFLAME_VISIBLE_DEVICES"].split(",")) == ["2", "3"]
        assert main.device_specs == {
            p: (p, "rw") for p in ("/dev/gcuctl", "/dev/gcu2", "/dev/gcu3")
        }
        await flow.handoff_served()

        again = await refused_then_fits_after_delete(flow, first, pod("again", limits={GCU: "2"}))
        allocated = (await flow.allocate(again))["main"]
        assert sorted(allocated.envs["ENFLAME_VISIBLE_DEVICES"].split(",")) == ["2", "3"]
        await flow.handoff_served()


async def test_a_drs_partition_goes_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any], efml_lib: Path, tmp_path: Path, efsmi: FakeEfsmi
) -> None:
    table_for("FAKE_EFML_TABLE").write(gcu(0))
    root = host_tree(tmp_path / "host", 1)
    settings = node_settings(
        efml_lib,
        root,
        mode="drs",
        efsmi_path=str(efsmi.path),
        drs_state_dir=str(tmp_path / "drs-state"),
    )
    node, scheduler = _hosts("enflame-drs", settings)
    flow = PodFlow(
        node, scheduler, vendor="enflame-drs", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    async with flow:
        assert flow.resource == DRS
        # HAMi placed a 3g.20gb partition (20480 MiB, 50 %): 3 of the GCU's 6 slices.
        hami = f"{NODE}-enflame-drs-0,Enflame,20480,50:;"
        flow.api.put(
            "pods",
            _hami_pod("from-hami", "hami.io/enflame-vgpu-devices-allocated", hami, {DRS: "3"}),
        )
        first = await flow.schedule(pod("infer", limits={DRS: "3"}))
        spec = first["spec"]["containers"][0]
        assert spec["resources"]["limits"][DRS] == "1"  # one share for kubelet ...
        assert {"name": "XPUSHARE_ENFLAME_DRS_REQUEST", "value": "drs:slices=3"} in spec["env"]
        annotations = first["metadata"]["annotations"]
        assert annotations["enflame.com/gcu-request-size"] == "3"  # ... three slices booked
        assert annotations["enflame.com/gcu-assigned-index"] == "0"
        main = (await flow.allocate(first))["main"]
        assert main.envs["ENFLAME_VISIBLE_DEVICES"] == "0"
        assert main.envs["XPUSHARE_ENFLAME_DRS_PROFILE"] == "3g.20gb"
        assert main.envs["XPUSHARE_ENFLAME_DRS_PROFILE_ID"] == "1"
        [cut] = efsmi.instances(0)  # the partition is cut on the GCU, as Enflame's plugin does
        assert cut["profile"] == "3g.20gb"
        assert main.envs["TOPS_VISIBLE_DEVICES"] == f"DRS-{cut['uuid']}"
        assert main.device_specs == {p: (p, "rw") for p in ("/dev/gcuctl", "/dev/gcu0")}
        await flow.handoff_served()

        # The GCU's 6 slices are taken (HAMi's 3 and ours): one more slice fits once ours is
        # given back.
        second = await refused_then_fits_after_delete(flow, first, pod("small", limits={DRS: "1"}))
        # The node agent's release hook destroys the deleted pod's instance.
        await flow.api.wait_for(lambda: not efsmi.instances(0), 10.0)
        small = (await flow.allocate(second))["main"]
        assert small.envs["XPUSHARE_ENFLAME_DRS_PROFILE"] == "1g.6gb"
        [cut] = efsmi.instances(0)
        assert cut["profile"] == "1g.6gb" and small.envs["TOPS_VISIBLE_DEVICES"].endswith(
            cut["uuid"]
        )
        await flow.handoff_served()

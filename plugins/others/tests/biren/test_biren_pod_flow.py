"""The whole pod flow with a Biren GPU on the fake BRML library.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the GPU it detected through the plugin, and
the fake kubelet admitting the pod over the device-plugin gRPC API: a HAMi user's pod asking
``birentech.com/gpu: 1`` gets the card's node under ``/dev/biren`` and ``BR_PHY_CARDS``; the
GPU's one slot is taken while it runs, and given back when it is deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from others_podflow import refused_then_fits_after_delete

from xpushare.plugins import PluginHost
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.podflow import PodFlow
from xpushare_others.biren import plugin

NODE = "node-a"
GPU = "birentech.com/gpu"
GIB = 1024**3
DEVICE = {
    "uuid": "BR-0",
    "name": "BR104",
    "mem_total": 32 * GIB,
    "bus_id": "00000000:50:00.0",
    "node_id": 3,
}


def _host(**config: Any) -> PluginHost:
    return vendor_host("biren", plugin.biren, config, node_name=NODE if config else None)


async def test_a_biren_gpu_goes_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any], brml_lib: Path, biren_host: Path, tmp_path: Path
) -> None:
    table_for("FAKE_BRML_TABLE").write(DEVICE, driver="1.6.2")
    node = _host(
        library_path=str(brml_lib),
        search_loader_path=False,
        host_root=str(biren_host),
        sysfs_root=str(tmp_path / "sys"),
    )
    flow = PodFlow(
        node, _host(), vendor="biren", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    limits = {GPU: "1"}
    async with flow:
        assert flow.resource == GPU
        first = await flow.schedule(pod("train", limits=limits))
        main = (await flow.allocate(first))["main"]
        assert main.envs["BR_PHY_CARDS"] == "card_3"
        assert main.device_specs == {"/dev/biren/card_3": ("/dev/biren/card_3", "rw")}
        assert main.mounts == {}
        await flow.handoff_served()

        second = await refused_then_fits_after_delete(flow, first, pod("again", limits=limits))
        again = (await flow.allocate(second))["main"]
        assert again.envs["BR_PHY_CARDS"] == "card_3"
        await flow.handoff_served()

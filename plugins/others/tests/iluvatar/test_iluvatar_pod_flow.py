"""The whole pod flow with an Iluvatar BI-V150 on the fake IXML library.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the GPU it detected through the plugin, and
the fake kubelet admitting the pod over the device-plugin gRPC API: a pod asking for a slice
in HAMi's per-chip units gets the GPU named for Iluvatar's runtime, its device node and
HAMi-core's limits and preload; deleting it gives the slice back.
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
from xpushare_others.iluvatar import plugin

NODE = "node-a"
GPU = "iluvatar.ai/BI-V150-vgpu"
MEM = "iluvatar.ai/BI-V150.vMem"
CORE = "iluvatar.ai/BI-V150.vCore"
GIB = 1024**3
DEVICE = {
    "uuid": "GPU-ix-0",
    "name": "Iluvatar_BI-V150",
    "mem_total": 32 * GIB,
    "mem_used": GIB,
    "bus_id": "00000000:20:00.0",
    "minor": 3,
    "health": 0,
    "util": 12,
    "temp": 51,
    "power_mw": 98_500,
}


def _host(**config: Any) -> PluginHost:
    return vendor_host("iluvatar", plugin.iluvatar, config, node_name=NODE if config else None)


async def test_an_iluvatar_slice_goes_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any], ixml_lib: Path, tmp_path: Path
) -> None:
    table_for("FAKE_IXML_TABLE").write(DEVICE, driver="4.2.0")
    host = tmp_path / "host"
    (host / "usr/local/vgpu").mkdir(parents=True)
    (host / "usr/local/vgpu/libvgpu.so").touch()
    node = _host(
        library_path=str(ixml_lib),
        search_loader_path=False,
        host_root=str(host),
        sysfs_root=str(tmp_path / "sys"),
        device_nodes=True,
    )
    flow = PodFlow(
        node, _host(), vendor="iluvatar", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    # 80 units of 256 MiB (20 GiB of the 32) and 40 % of the cores: two do not fit one GPU.
    limits = {GPU: "1", MEM: "80", CORE: "40"}
    async with flow:
        assert flow.resource == GPU
        first = await flow.schedule(pod("infer", limits=limits))
        env = first["spec"]["containers"][0]["env"]
        assert {"name": "SOL_CONTINER_NAME", "value": "main"} in env  # the webhook's patch
        main = (await flow.allocate(first))["main"]
        assert main.envs["IX_VISIBLE_DEVICES"] == "GPU-ix-0"
        assert main.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "20480m"
        assert main.envs["CUDA_DEVICE_SM_LIMIT"] == "40"
        assert main.device_specs == {"/dev/iluvatar3": ("/dev/iluvatar3", "rw")}
        assert main.mounts == {
            "/usr/local/vgpu/libvgpu.so": ("/usr/local/vgpu/libvgpu.so", True),
            "/etc/ld.so.preload": ("/usr/local/vgpu/ld.so.preload", True),
        }
        await flow.handoff_served()

        second = await refused_then_fits_after_delete(flow, first, pod("again", limits=limits))
        again = (await flow.allocate(second))["main"]
        assert again.envs["IX_VISIBLE_DEVICES"] == "GPU-ix-0"
        assert again.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "20480m"
        await flow.handoff_served()

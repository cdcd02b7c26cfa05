"""The whole pod flow with a Moore Threads GPU on the fake libmtml (through real pymtml).

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the GPU it detected through the plugin, and
the fake kubelet admitting the pod over the device-plugin gRPC API: a pod asking for an sGPU
in HAMi's units (512 MiB memory units, sixteenths of a GPU) gets the GPU named for Moore
Threads' toolkit and its QoS limits in bytes and sixteenths; deleting it gives the sGPU back.
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
from xpushare_others.mthreads import plugin

NODE = "node-a"
VGPU = "mthreads.com/vgpu"
MEM = "mthreads.com/sgpu-memory"
CORE = "mthreads.com/sgpu-core"
GIB = 1024**3
DEVICE = {
    "uuid": "GPU-mt-0",
    "name": "MTT_S4000",
    "sbdf": "0000:40:00.0",
    "mem_total": 48 * GIB,
    "mem_used": 6 * GIB,
    "ecc_ue": 0,
    "cores": 8192,
    "util": 55,
    "temp": 61,
    "power_mw": 180_000,
}


def _host(**config: Any) -> PluginHost:
    return vendor_host("mthreads", plugin.mthreads, config, node_name=NODE if config else None)


async def test_a_moore_threads_sgpu_goes_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any], mtml_lib: Path, tmp_path: Path
) -> None:
    table_for("FAKE_MTML_TABLE").write(DEVICE, driver="2.7.1")
    node = _host(
        library_path=str(mtml_lib), search_loader_path=False, sysfs_root=str(tmp_path / "sys")
    )
    flow = PodFlow(
        node, _host(), vendor="mthreads", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    # 64 units of 512 MiB (32 GiB of the 48) and 8 sixteenths: two do not fit one GPU.
    limits = {VGPU: "1", MEM: "64", CORE: "8"}
    async with flow:
        assert flow.resource == VGPU
        first = await flow.schedule(pod("infer", limits=limits))
        main = (await flow.allocate(first))["main"]
        assert main.envs["MTHREADS_VISIBLE_DEVICES"] == "0"
        assert main.envs["MTHREADS_QOS_MEMORY_LIMIT"] == str(32 * GIB)
        assert main.envs["MTHREADS_QOS_COMPUTING_POWER_WEIGHT"] == "8"
        assert main.device_specs == {}  # the toolkit injects the nodes it is named
        assert main.mounts == {}
        await flow.handoff_served()

        second = await refused_then_fits_after_delete(flow, first, pod("again", limits=limits))
        again = (await flow.allocate(second))["main"]
        assert again.envs["MTHREADS_VISIBLE_DEVICES"] == "0"
        assert again.envs["MTHREADS_QOS_MEMORY_LIMIT"] == str(32 * GIB)
        await flow.handoff_served()

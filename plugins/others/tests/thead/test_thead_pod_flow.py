"""The whole pod flow with a T-Head PPU on the fake HGML library.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the PPU it detected through the plugin, and
the fake kubelet admitting the pod over the device-plugin gRPC API: a pod asking a slice in
GPUStack's sliced units gets the PPU's nodes, HGGC's quota variables and the preloaded shims;
a second such slice does not fit while the first runs, and fits once it is deleted.
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
from xpushare_others.thead import plugin

NODE = "node-a"
PPU = "alibabacloud.com/ppu"
MEM = "alibabacloud.com/ppu.sliced.memory-mib"
CORES = "alibabacloud.com/ppu.sliced.cores-percentage"
GIB = 1024**3
DEVICE = {"uuid": "PPU-0", "name": "PPU-ZW810E", "mem_total": 96 * GIB, "minor": 7}


def _host(**config: Any) -> PluginHost:
    return vendor_host("thead", plugin.thead, config, node_name=NODE if config else None)


async def test_a_ppu_slice_goes_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any], hgml_lib: Path, thead_host: Path, tmp_path: Path
) -> None:
    table_for("FAKE_HGML_TABLE").write(DEVICE, driver="1.5.1")
    node = _host(
        library_path=str(hgml_lib),
        search_loader_path=False,
        host_root=str(thead_host),
        sysfs_root=str(tmp_path / "sys"),
    )
    flow = PodFlow(
        node, _host(), vendor="thead", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    # 60 GiB of the 96 and 50 % of the cores: two do not fit one PPU.
    limits = {PPU: "1", MEM: str(60 * 1024), CORES: "50"}
    async with flow:
        assert flow.resource == PPU
        first = await flow.schedule(pod("infer", limits=limits))
        main = (await flow.allocate(first))["main"]
        assert main.envs["HGGC_DEVICE_MEMORY_LIMIT_0"] == str(60 * 1024)
        assert main.envs["HGGC_DEVICE_SM_LIMIT"] == "50"
        assert main.device_specs == {
            "/dev/alixpu": ("/dev/alixpu", "rw"),
            "/dev/alixpu_ctl": ("/dev/alixpu_ctl", "rw"),
            "/dev/alixpu_ppu0": ("/dev/alixpu_ppu0", "rw"),
        }
        assert main.mounts["/etc/ld.so.preload"] == ("/usr/local/vppu/ld.so.preload", True)
        assert "/usr/local/vppu/hggc_quota.so" in main.mounts
        await flow.handoff_served()

        second = await refused_then_fits_after_delete(flow, first, pod("again", limits=limits))
        again = (await flow.allocate(second))["main"]
        assert again.envs["HGGC_DEVICE_MEMORY_LIMIT_0"] == str(60 * 1024)
        await flow.handoff_served()

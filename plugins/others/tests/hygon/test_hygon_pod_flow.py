"""The whole pod flow with a Hygon DCU on the fake ROCm SMI library.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the DCU it detected through the plugin, and
the fake kubelet admitting the pod over the device-plugin gRPC API: a pod asking for a slice
in HAMi's units gets the KFD and DRM nodes of the DCU, a vDCU config with its CUs and memory,
and the DTK runtime; deleting it gives the slice back.
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
from xpushare_others.hygon import plugin

NODE = "node-a"
DCU = "hygon.com/dcunum"
MEM = "hygon.com/dcumem"
CORES = "hygon.com/dcucores"
GIB = 1024**3
#: One 64 GiB DCU: its 80 CUs come from the host tree's KFD topology (conftest).
DEVICE = {
    "name": "K100_AI",
    "uid": "0xabc0",
    "bus": "0x10",
    "numa": 0,
    "mem_total": 64 * GIB,
    "mem_used": 2 * GIB,
    "busy": 10,
    "temp_mc": 45000,
    "power_uw": 100_000_000,
    "ecc_ue": 0,
    "render": 128,
}


def _host(**config: Any) -> PluginHost:
    return vendor_host("hygon", plugin.hygon, config, node_name=NODE if config else None)


async def test_a_hygon_slice_goes_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any], rsmi_lib: Path, host_tree: Path, tmp_path: Path
) -> None:
    table_for("FAKE_RSMI_TABLE").write(DEVICE)
    vdev = tmp_path / "vdev"
    node = _host(
        library_path=str(rsmi_lib),
        search_loader_path=False,
        host_root=str(host_tree),
        sysfs_root=str(host_tree / "sys"),
        vdev_agent_dir=str(vdev),
    )
    flow = PodFlow(
        node, _host(), vendor="hygon", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    # 16 GiB and 60 % of the DCU's compute: two such pods cannot share the one DCU's cores.
    limits = {DCU: "1", MEM: "16384", CORES: "60"}
    async with flow:
        assert flow.resource == DCU
        first = await flow.schedule(pod("infer", limits=limits))
        main = (await flow.allocate(first))["main"]
        assert main.envs["XPUSHARE_HYGON_DEVICES"] == "DCU-000000000000abc0"
        assert main.device_specs == {
            "/dev/kfd": ("/dev/kfd", "rwm"),
            "/dev/mkfd": ("/dev/mkfd", "rwm"),
            "/dev/dri/card0": ("/dev/dri/card0", "rw"),
            "/dev/dri/renderD128": ("/dev/dri/renderD128", "rw"),
        }
        uid = first["metadata"]["uid"]
        assert main.mounts == {
            "/etc/vdev/docker": (f"/usr/local/vgpu/dcu/{uid}_main", True),
            "/opt/hygondriver": ("/opt/dtk", True),
            "/opt/hyhal": ("/opt/hyhal", True),
        }
        conf = (vdev / f"{uid}_main" / "vdev0.conf").read_text()
        # 60 % of 80 CUs, the first 48 bits of the mask, and the asked memory.
        assert "PciBusId: 0000:10:00.0\n" in conf
        assert "cu_mask: 0xffffffffffff\ncu_count: 48\nmem: 16384 MiB\n" in conf
        await flow.handoff_served()

        second = await refused_then_fits_after_delete(flow, first, pod("again", limits=limits))
        # The node agent's release hook removes the deleted pod's vDCU config, freeing its CUs.
        await flow.api.wait_for(lambda: not (vdev / f"{uid}_main").exists(), 10.0)
        again = (await flow.allocate(second))["main"]
        assert again.envs["XPUSHARE_HYGON_DEVICES"] == "DCU-000000000000abc0"
        uid = second["metadata"]["uid"]
        assert again.mounts["/etc/vdev/docker"] == (f"/usr/local/vgpu/dcu/{uid}_main", True)
        conf = (vdev / f"{uid}_main" / "vdev0.conf").read_text()
        assert "cu_mask: 0xffffffffffff\ncu_count: 48\n" in conf  # the freed CUs again
        await flow.handoff_served()

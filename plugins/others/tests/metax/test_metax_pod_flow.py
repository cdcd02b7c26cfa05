"""The whole pod flow with a MetaX GPU in sGPU mode on the fake MXSML library.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the GPU it detected through the plugin, and
the fake kubelet admitting the pod over the device-plugin gRPC API: a pod asking for an sGPU
in HAMi's units gets the control and DRM nodes and its slice named in ``METAX_SGPUS``, the
webhook writes the default QoS policy, and deleting the pod gives the slice back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from others_podflow import WAIT_S, refused_then_fits_after_delete

from xpushare.plugins import PluginHost
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.podflow import PodFlow
from xpushare_others.metax import plugin

NODE = "node-a"
SGPU = "metax-tech.com/sgpu"
CORE = "metax-tech.com/vcore"
MEM = "metax-tech.com/vmemory"
GIB_KIB = 1024**2
BDF = "0000:30:00.0"
DEVICE = {
    "uuid": "GPU-mx-0",
    "name": "MXC500",
    "bdf": BDF,
    "vram_kib": 64 * GIB_KIB,
    "vram_used_kib": 3 * GIB_KIB,
    "dram_ue": 0,
    "usage": 40,
    "temp_centi": 4250,
    "power_mw": 201_000,
}


def _host(**config: Any) -> PluginHost:
    return vendor_host("metax", plugin.metax, config, node_name=NODE if config else None)


def _host_tree(root: Path) -> Path:
    """/dev/mxcd and one GPU's DRM nodes, and its sysfs entry (NUMA, drm/)."""
    (root / "dev/dri").mkdir(parents=True)
    for name in ("dev/mxcd", "dev/dri/card1", "dev/dri/renderD129"):
        (root / name).touch()
    dev = root / "sys/bus/pci/devices" / BDF
    (dev / "drm/card1").mkdir(parents=True)
    (dev / "drm/renderD129").mkdir()
    (dev / "numa_node").write_text("0\n")
    return root


async def test_a_metax_sgpu_goes_from_the_webhook_to_the_kubelet_and_back(
    table_for: Callable[[str], Any], mxsml_lib: Path, tmp_path: Path
) -> None:
    table_for("FAKE_MXSML_TABLE").write(DEVICE)
    host = _host_tree(tmp_path / "host")
    node = _host(
        library_path=str(mxsml_lib),
        search_loader_path=False,
        host_root=str(host),
        sysfs_root=str(host / "sys"),
    )
    flow = PodFlow(
        node, _host(), vendor="metax", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    # 40 GiB (a bare vmemory is GiB) of the 64 and 30 % of the cores: two do not fit.
    limits = {SGPU: "1", MEM: "40", CORE: "30"}
    async with flow:
        assert flow.resource == SGPU
        first = await flow.schedule(pod("infer", limits=limits))
        annotations = first["metadata"]["annotations"]
        assert annotations["metax-tech.com/sgpu-qos-policy"] == "best-effort"
        main = (await flow.allocate(first))["main"]
        assert main.envs["XPUSHARE_METAX_DEVICES"] == "GPU-mx-0"
        assert main.envs["METAX_SGPUS"] == f"sgpu={BDF};compute=30;vram=40960"
        assert main.device_specs == {
            "/dev/mxcd": ("/dev/mxcd", "rw"),
            "/dev/dri/card1": ("/dev/dri/card1", "rw"),
            "/dev/dri/renderD129": ("/dev/dri/renderD129", "rw"),
        }
        assert main.mounts == {}
        await flow.handoff_served()

        second = await refused_then_fits_after_delete(flow, first, pod("again", limits=limits))
        again = (await flow.allocate(second))["main"]
        assert again.envs["METAX_SGPUS"] == f"sgpu={BDF};compute=30;vram=40960"
        await flow.handoff_served()


async def test_app_classes_keep_their_gpu_through_the_real_scheduler(
    table_for: Callable[[str], Any], mxsml_lib: Path, tmp_path: Path
) -> None:
    """An offline pod's GPU refuses a pod without a class (the ledger remembers the class from
    the bind), takes an online pod with no compute booked, and is free again after both go."""
    table_for("FAKE_MXSML_TABLE").write(DEVICE)
    host = _host_tree(tmp_path / "host")
    node = _host(
        library_path=str(mxsml_lib),
        search_loader_path=False,
        host_root=str(host),
        sysfs_root=str(host / "sys"),
    )
    flow = PodFlow(
        node, _host(), vendor="metax", scheduler_settings={"bind.repair_interval_s": 0.05}
    )
    app = "metax-tech.com/sgpu-app-class"
    limits = {SGPU: "1", MEM: "20", CORE: "100"}
    async with flow:
        batch = await flow.schedule(
            pod("batch", limits={SGPU: "1", MEM: "20", CORE: "70"}, annotations={app: "offline"})
        )
        await flow.allocate(batch)
        await flow.handoff_served()
        plain = flow.create(
            await flow.admit(pod("plain", limits={SGPU: "1", MEM: "4", CORE: "10"}))
        )
        refused = await flow.filter(plain)
        assert refused.get("NodeNames") in (None, []), refused
        assert app in refused["FailedNodes"][NODE], refused
        # 100 % of the cores asked, 70 % booked: an online pod still fits, booking none.
        online = await flow.schedule(pod("serve", limits=limits, annotations={app: "online"}))
        assert "metax-tech.com/sgpu-qos-policy" not in online["metadata"]["annotations"]
        main = (await flow.allocate(online))["main"]
        assert main.envs["METAX_SGPUS"] == f"sgpu={BDF};compute=0;vram=20480"
        assert main.envs["XPUSHARE_METAX_APP_CLASS"] == "online"
        await flow.handoff_served()
        for holder in (batch, online):
            await flow.delete(holder)
            name = holder["metadata"]["name"]
            await flow.api.wait_for(
                lambda n=name: flow.scheduler.cluster.pod_by_name("default", n) is None, WAIT_S
            )
        fits = await flow.filter(plain)
        assert fits.get("NodeNames") == [NODE], fits

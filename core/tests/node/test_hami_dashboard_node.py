"""HAMi's Grafana dashboard against the node agent's /metrics with --hami-metrics.

The vGPU monitor's side of the dashboard (core/tests/data/hami/): host device figures and
per-container ones, with every label the queries use and HAMi's values (its utilization
"ratios" are percents).
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
from nodekit import NODE, eventually, mock_host, running
from prometheus_client.parser import text_string_to_metric_families

from xpushare.models import ContainerUsage, MonitorSnapshot
from xpushare.testing.dashboards import metrics_used

DASHBOARD = Path(__file__).parents[1] / "data" / "hami" / "hami-vgpu-dashboard.json"
NODE_SIDE = ("hami_host_gpu_", "hami_vgpu_memory_used", "hami_vgpu_memory_limit", "hami_container_")
MIB = 1024 * 1024


async def _scrape(run) -> dict[str, list[tuple[dict[str, str], float]]]:
    url = f"http://127.0.0.1:{run.agent.http_port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


async def test_the_node_agent_exports_what_the_dashboard_reads(plugin_dir):
    async with running(plugin_dir, host=mock_host("2x A100-80GB"), hami_metrics=True) as run:
        await eventually(lambda: run.agent.monitor.get("mock") is not None, "first sample")
        # What a vendor that can tell per-container usage (HAMi-core's) reports: one
        # container on both GPUs.
        first = run.agent.monitor.get("mock")
        assert first is not None
        ids = [d.device_id for d in first.devices]
        containers = tuple(
            ContainerUsage(
                device_id=device,
                namespace="team",
                pod="train",
                container="main",
                memory_used_mib=1000 * (i + 1),
                memory_limit_mib=4000,
                utilization_percent=40.0,
            )
            for i, device in enumerate(reversed(ids))
        )
        run.agent.monitor.put("mock", MonitorSnapshot(devices=first.devices, containers=containers))
        samples = await _scrape(run)
    for metric, labels in metrics_used(DASHBOARD, "hami_").items():
        if not metric.startswith(NODE_SIDE):
            continue
        assert samples.get(metric), f"{metric} is not exported"
        for got, _ in samples[metric]:
            assert labels <= set(got), f"{metric} lacks {labels - set(got)}"
    host = {s[0]["device_index"]: s for s in samples["hami_host_gpu_memory_used_bytes"]}
    assert host["0"][1] == 81920 // 4 * MIB and host["0"][0]["node"] == NODE
    assert {s[0]["device_index"]: s[1] for s in samples["hami_host_gpu_utilization_ratio"]} == {
        "0": 0.0,
        "1": 10.0,
    }
    used = {s[0]["device_uuid"]: s for s in samples["hami_vgpu_memory_used_bytes"]}
    # vdevice_index is the device's place among the container's own devices (by index).
    assert used[ids[0]][0]["vdevice_index"] == "0" and used[ids[0]][1] == 2000 * MIB
    assert used[ids[1]][0]["vdevice_index"] == "1" and used[ids[1]][1] == 1000 * MIB
    assert {s[1] for s in samples["hami_vgpu_memory_limit_bytes"]} == {4000 * MIB}
    assert {s[1] for s in samples["hami_container_device_utilization_ratio"]} == {40.0}


async def test_without_the_flag_no_hami_name_is_exported(plugin_dir):
    async with running(plugin_dir, host=mock_host("1x A100-80GB")) as run:
        await eventually(lambda: run.agent.monitor.get("mock") is not None, "first sample")
        exported = await _scrape(run)
        assert not [m for m in exported if m.startswith("hami_")]
        assert not [m for m in exported if m in LEGACY_NODE]


DASHBOARD_22043 = DASHBOARD.with_name("grafana-22043-hami-vgpu-metrics-dashboard.json")
#: HAMi's vGPU monitor families before v2.8 (cmd/vGPUmonitor/metrics.go at 3c220fcf), with
#: the node_name label HAMi's ServiceMonitor added; Device_memory_desc_of_container without
#: HAMi-core's breakdown labels (context, module, data, offset).
LEGACY_NODE = {
    "HostGPUMemoryUsage": {"deviceidx", "deviceuuid", "node_name"},
    "HostCoreUtilization": {"deviceidx", "deviceuuid", "node_name"},
    **{
        name: {"podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "node_name"}
        for name in (
            "vGPU_device_memory_usage_in_bytes",
            "vGPU_device_memory_limit_in_bytes",
            "Device_memory_desc_of_container",
            "Device_utilization_desc_of_container",
        )
    },
}


async def test_the_node_agent_exports_what_22043_reads(plugin_dir):
    async with running(plugin_dir, host=mock_host("2x A100-80GB"), hami_metrics=True) as run:
        await eventually(lambda: run.agent.monitor.get("mock") is not None, "first sample")
        first = run.agent.monitor.get("mock")
        assert first is not None
        device = first.devices[1].device_id
        usage = ContainerUsage(
            device_id=device,
            namespace="team",
            pod="train",
            container="main",
            memory_used_mib=1500,
            memory_limit_mib=4000,
            utilization_percent=40.0,
        )
        run.agent.monitor.put("mock", MonitorSnapshot(devices=first.devices, containers=(usage,)))
        samples = await _scrape(run)
    used = metrics_used(DASHBOARD_22043, tuple(LEGACY_NODE))
    assert len(used) == 6, "the dashboard's queries were not read"
    for metric, labels in used.items():
        assert samples.get(metric), f"{metric} is not exported"
        for got, _ in samples[metric]:
            assert labels <= set(got), f"{metric} lacks {labels - set(got)}"
            assert set(got) == LEGACY_NODE[metric], metric
            assert got["node_name"] == NODE
    host = {s[0]["deviceidx"]: s[1] for s in samples["HostGPUMemoryUsage"]}
    assert host["0"] == 81920 // 4 * MIB
    assert {s[0]["deviceidx"]: s[1] for s in samples["HostCoreUtilization"]} == {
        "0": 0.0,
        "1": 10.0,
    }
    ((labels, value),) = samples["vGPU_device_memory_usage_in_bytes"]
    assert value == 1500 * MIB and labels["deviceuuid"] == device
    assert (labels["podnamespace"], labels["podname"], labels["ctrname"]) == (
        "team",
        "train",
        "main",
    )
    assert labels["vdeviceid"] == "0"
    assert [v for _, v in samples["vGPU_device_memory_limit_in_bytes"]] == [4000 * MIB]
    assert [v for _, v in samples["Device_memory_desc_of_container"]] == [1500 * MIB]
    assert [v for _, v in samples["Device_utilization_desc_of_container"]] == [40.0]

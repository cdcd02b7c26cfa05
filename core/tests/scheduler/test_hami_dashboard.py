"""HAMi's Grafana dashboard against the scheduler's /metrics with HAMi's names switched on.

The dashboard (core/tests/data/hami/) reads the scheduler's figures and the vGPU monitor's;
the node agent's side is checked in core/tests/node/test_hami_dashboard_node.py. Here: every
metric it reads is one of the two sides, and the scheduler's are exported with each label
the queries use and HAMi's values.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from sched_helpers import DevicePlugin, add_nodes, bind_args, create_pod, gpu_pod, start_scheduler

from xpushare.testing.dashboards import metrics_used

DASHBOARD = Path(__file__).parents[1] / "data" / "hami" / "hami-vgpu-dashboard.json"
#: What HAMi's scheduler exports (cmd/scheduler/metrics.go); the rest is its vGPU monitor's.
SCHEDULER_SIDE = (
    "hami_gpu_",
    "hami_node_gpu_",
    "hami_resource_quota_",
    "hami_vgpu_memory_allocated",
    "hami_vgpu_core_allocated",
)
NODE_SIDE = ("hami_host_gpu_", "hami_vgpu_memory_used", "hami_vgpu_memory_limit", "hami_container_")
MIB = 1024 * 1024


def test_every_metric_of_the_dashboard_is_exported_by_one_side() -> None:
    used = metrics_used(DASHBOARD, "hami_")
    assert len(used) >= 10, "the dashboard's queries were not read"
    for metric in used:
        assert metric.startswith(SCHEDULER_SIDE + NODE_SIDE), metric


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


async def test_the_scheduler_exports_what_the_dashboard_reads(api, http):
    sched = await start_scheduler(api, **{"metrics.hami_names": True})
    try:
        add_nodes(api, 1, "2x A100-80GB")
        api.put(
            "resourcequotas",
            {
                "metadata": {"name": "gpu", "namespace": "team"},
                "spec": {"hard": {"limits.xpushare.io/mock-gpumem": "60000"}},
            },
        )
        p = create_pod(api, gpu_pod("p", namespace="team", gpu="1", mem="20000", cores="30"))
        await sched.settle(api)
        with DevicePlugin(api):
            assert (await sched.post(http, "bind", bind_args(p, "node-0"))) == {"Error": ""}
        await sched.settle(api)
        async with http.get(f"{sched.metrics_url or sched.url}/metrics") as r:
            samples = _samples(await r.text())
    finally:
        await sched.close()
    for metric, labels in metrics_used(DASHBOARD, "hami_").items():
        if not metric.startswith(SCHEDULER_SIDE):
            continue
        assert samples.get(metric), f"{metric} is not exported"
        for got, _ in samples[metric]:
            assert labels <= set(got), f"{metric} lacks {labels - set(got)}"
    # HAMi's values: bytes, cores as percent, shared count, the ratio in 0..1.
    allocated = {s[0]["device_uuid"]: s[1] for s in samples["hami_gpu_memory_allocated_bytes"]}
    booked = [uuid for uuid, v in allocated.items() if v]
    assert len(booked) == 1 and allocated[booked[0]] == 20000 * MIB
    limit = {s[0]["device_uuid"]: s[1] for s in samples["hami_gpu_memory_limit_bytes"]}
    assert limit[booked[0]] == 81920 * MIB
    cores = {s[0]["device_uuid"]: s[1] for s in samples["hami_gpu_core_allocated_ratio"]}
    assert cores[booked[0]] == 30
    ratio = {s[0]["device_uuid"]: s[1] for s in samples["hami_node_gpu_memory_allocated_ratio"]}
    assert ratio[booked[0]] == 20000 / 81920
    (container,) = samples["hami_vgpu_memory_allocated_bytes"]
    assert container[1] == 20000 * MIB
    assert container[0] | {"device_uuid": ""} == {
        "namespace": "team",
        "node": "node-0",
        "pod": "p",
        "container_index": "0",
        "device_uuid": "",
    }
    assert [v for _, v in samples["hami_vgpu_core_allocated_ratio"]] == [30]
    (quota,) = samples["hami_resource_quota_used"]
    assert quota == (
        {"namespace": "team", "quota_name": "xpushare.io/mock-gpumem", "limit": "60000"},
        20000,
    )


async def test_without_the_setting_no_hami_name_is_exported(api, sched, http):
    add_nodes(api, 1, "2x A100-80GB")
    await sched.settle(api)
    async with http.get(f"{sched.metrics_url or sched.url}/metrics") as r:
        text = await r.text()
    assert "hami_" not in text
    assert not [name for name in LEGACY_SCHEDULER if name in text]


# -- grafana.com 22043: the dashboard HAMi's documentation pointed to, pre-v2.8 names --------

DASHBOARD_22043 = DASHBOARD.with_name("grafana-22043-hami-vgpu-metrics-dashboard.json")
#: HAMi's scheduler families before v2.8 (cmd/scheduler/metrics.go at 3c220fcf) and labels.
LEGACY_SCHEDULER = {
    "nodeGPUOverview": {
        "nodeid", "deviceuuid", "deviceidx", "devicecores", "sharedcontainers",
        "devicememorylimit", "devicetype",
    },
    "vGPUMemoryPercentage": {"podnamespace", "nodename", "podname", "containeridx", "deviceuuid"},
    "vGPUCorePercentage": {"podnamespace", "nodename", "podname", "containeridx", "deviceuuid"},
}  # fmt: skip
#: Its vGPU monitor's (cmd/vGPUmonitor/metrics.go), checked in core/tests/node.
LEGACY_NODE = (
    "HostGPUMemoryUsage",
    "HostCoreUtilization",
    "vGPU_device_memory_",
    "Device_memory_desc_of_container",
    "Device_utilization_desc_of_container",
)
#: NVIDIA's dcgm-exporter, which HAMi's documentation deploys next to HAMi for this
#: dashboard: neither HAMi's metrics nor ours.
DCGM = "DCGM_"
LEGACY_PREFIXES = ("nodeGPU", "GPUDevice", "vGPU", "Device_", "Host", DCGM)


def test_every_metric_of_22043_is_exported_by_one_side_or_is_dcgm_exporters() -> None:
    used = metrics_used(DASHBOARD_22043, LEGACY_PREFIXES)
    ours = [m for m in used if not m.startswith(DCGM)]
    assert len(ours) >= 9, "the dashboard's queries were not read"
    for metric in ours:
        assert metric in LEGACY_SCHEDULER or metric.startswith(LEGACY_NODE), metric
    # The overview table shows these labels as columns.
    assert used["nodeGPUOverview"] <= LEGACY_SCHEDULER["nodeGPUOverview"]


async def test_the_scheduler_exports_what_22043_reads(api, http):
    sched = await start_scheduler(api, **{"metrics.hami_names": True})
    try:
        add_nodes(api, 1, "2x A100-80GB")
        p = create_pod(api, gpu_pod("p", namespace="team", gpu="1", mem="20480", cores="30"))
        await sched.settle(api)
        with DevicePlugin(api):
            assert (await sched.post(http, "bind", bind_args(p, "node-0"))) == {"Error": ""}
        await sched.settle(api)
        async with http.get(f"{sched.metrics_url or sched.url}/metrics") as r:
            samples = _samples(await r.text())
    finally:
        await sched.close()
    for metric, labels in metrics_used(DASHBOARD_22043, LEGACY_PREFIXES).items():
        if metric not in LEGACY_SCHEDULER:
            continue
        assert samples.get(metric), f"{metric} is not exported"
        for got, _ in samples[metric]:
            assert labels <= set(got), f"{metric} lacks {labels - set(got)}"
            assert LEGACY_SCHEDULER[metric] == set(got), metric  # HAMi's label set, exactly
    # HAMi's values: the overview is the memory booked in bytes, with the cores booked,
    # the containers sharing and the capacity in MiB as labels.
    overview = {s[0]["deviceuuid"]: s for s in samples["nodeGPUOverview"]}
    (booked,) = [u for u, s in overview.items() if s[1]]
    labels, value = overview[booked]
    assert value == 20480 * MIB and labels["nodeid"] == "node-0"
    assert (labels["devicecores"], labels["sharedcontainers"]) == ("30", "1")
    assert labels["devicememorylimit"] == "81920"
    ((share_labels, share),) = samples["vGPUMemoryPercentage"]
    assert share == 20480 / 81920 and share_labels["nodename"] == "node-0"
    assert share_labels["podname"] == "p" and share_labels["deviceuuid"] == booked
    assert [v for _, v in samples["vGPUCorePercentage"]] == [30]

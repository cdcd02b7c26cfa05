"""Cluster state from watches: counting, giving back, HAMi pods, relist after 410, restart."""

from __future__ import annotations

from sched_helpers import (
    DevicePlugin,
    add_nodes,
    bind_args,
    create_pod,
    filter_args,
    gpu_pod,
    start_scheduler,
)

from xpushare.scheduler.objects import pod_view
from xpushare.testing.apiserver import node, pod

HAMI_REGISTER = (
    '[{"id":"GPU-aaa","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA A100",'
    '"health":true},{"id":"GPU-bbb","index":1,"count":10,"devmem":81920,"devcore":100,'
    '"type":"NVIDIA A100","health":true}]'
)


def used_memory(sched, node_name):
    state = sched.scheduler.ledger.node(node_name)
    return {d.id: d.used_memory for t in state.tables.values() for d in t.devices}


async def test_bound_pods_count_and_deleted_or_finished_pods_give_back(api, sched, http):
    add_nodes(api, 1)
    a = create_pod(api, gpu_pod("a", gpu="1", mem="10000"))
    b = create_pod(api, gpu_pod("b", gpu="1", mem="20000"))
    await sched.settle(api)
    with DevicePlugin(api):
        for p in (a, b):
            assert (await sched.post(http, "bind", bind_args(p, "node-0"))) == {"Error": ""}
    await sched.settle(api)
    assert sum(used_memory(sched, "node-0").values()) == 30000
    api.modify("pods", "a", lambda o: o["status"].__setitem__("phase", "Succeeded"))
    await sched.settle(api)
    assert sum(used_memory(sched, "node-0").values()) == 20000
    api.delete("pods", "b")
    await sched.settle(api)
    assert sum(used_memory(sched, "node-0").values()) == 0
    assert len(sched.scheduler.ledger) == 0


async def test_pods_placed_by_hami_are_counted(api, sched, http):
    api.put("nodes", node("hami-node", {"hami.io/node-nvidia-register": HAMI_REGISTER}))
    hami_pod = pod(
        "trainer",
        node_name="hami-node",
        phase="Running",
        limits={"nvidia.com/gpu": "1"},
        annotations={
            "hami.io/vgpu-node": "hami-node",
            "hami.io/vgpu-devices-allocated": "GPU-aaa,NVIDIA,60000,30:;",
        },
    )
    api.put("pods", hami_pod)
    await sched.settle(api)
    state = sched.scheduler.ledger.node("hami-node")
    device = state.tables["nvidia"].by_id["GPU-aaa"]
    assert (device.used_memory, device.used_compute, device.used_slots) == (60000, 30, 1)
    assert state.tables["nvidia"].by_id["GPU-bbb"].used_memory == 0


async def test_malformed_annotations_are_reported_and_ignored(api, sched, http):
    add_nodes(api, 1)
    api.put("nodes", node("broken", {"xpushare.io/inventory-mock": "{nope"}))
    api.put("nodes", node("wrong-hami", {"hami.io/node-nvidia-register": "[{]"}))
    api.put(
        "pods",
        pod("garbled", node_name="node-0", annotations={"xpushare.io/assignment": "12"}),
    )
    api.put(
        "pods",
        pod(
            "bad-hami",
            node_name="node-0",
            annotations={"hami.io/vgpu-devices-allocated": "GPU-x,NVIDIA,-5,0:;"},
        ),
    )
    await sched.settle(api)
    # Still serving: a good pod is filtered and placed on the good node.
    want = create_pod(api, gpu_pod("want", gpu="1"))
    await sched.settle(api)
    result = await sched.post(http, "filter", filter_args(want, ["node-0", "broken"]))
    assert result["NodeNames"] == ["node-0"]
    assert "broken" in result["FailedAndUnresolvableNodes"]
    errors = sched.scheduler.metrics.annotation_errors
    counted = {
        (s.labels["kind"], s.labels["key"]): s.value
        for m in errors.collect()
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert counted[("node", "xpushare.io/inventory-mock")] == 1
    assert counted[("node", "hami.io/node-nvidia-register")] == 1
    assert counted[("pod", "xpushare.io/assignment")] == 2
    await sched.scheduler.events.flush()
    events = [w.body for w in api.writes("events")]
    bad = {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"])
        for e in events
        if e["reason"] == "MalformedAnnotation"
    }
    assert bad == {
        ("Node", "broken"),
        ("Node", "wrong-hami"),
        ("Pod", "garbled"),
        ("Pod", "bad-hami"),
    }


async def test_watch_expiry_relists_and_forgets_what_was_deleted_meanwhile(api, sched, http):
    add_nodes(api, 2)
    a = create_pod(api, gpu_pod("a", gpu="1", mem="1000"))
    await sched.settle(api)
    with DevicePlugin(api):
        assert (await sched.post(http, "bind", bind_args(a, "node-0"))) == {"Error": ""}
    await sched.settle(api)
    pods_informer = next(i for i in sched.scheduler.informers if i.resource == "pods")
    relists = pods_informer.relists
    # While the scheduler is cut off, a pod and a node go away and history is compacted:
    # resuming is impossible (410), so the informers must relist and reconcile.
    api.inject("GET", r"watch|/api/v1/pods$|/api/v1/nodes$", 503, times=2)
    api.close_watches()
    api.delete("pods", "a")
    api.delete("nodes", "node-1")
    api.compact()
    await api.wait_for(lambda: pods_informer.relists > relists)
    await sched.settle(api)
    assert len(sched.scheduler.ledger) == 0
    assert sched.scheduler.ledger.node("node-1") is None
    # The operator sees why it relisted: the expiry is counted per resource.
    expired = sched.scheduler.metrics.watch_expired.labels(resource="pods")._value.get()
    assert expired >= 1


async def test_restart_rebuilds_identical_state(api, sched, http):
    add_nodes(api, 3, "4x A100-80GB")
    api.put("nodes", node("hami-node", {"hami.io/node-nvidia-register": HAMI_REGISTER}))
    api.put(
        "pods",
        pod(
            "hami",
            node_name="hami-node",
            annotations={"hami.io/vgpu-devices-allocated": "GPU-bbb,NVIDIA,1000,10:;"},
        ),
    )
    shapes = [{"gpu": "1", "mem": "20000"}, {"gpu": "2", "pct": "25"}, {"gpu": "1", "cores": "100"}]
    pods = [create_pod(api, gpu_pod(f"p{i}", **shapes[i % 3])) for i in range(9)]
    await sched.settle(api)
    with DevicePlugin(api):
        for i, p in enumerate(pods):
            result = await sched.post(
                http, "filter", filter_args(p, ["node-0", "node-1", "node-2"])
            )
            target = result["NodeNames"][i % len(result["NodeNames"])]
            assert (await sched.post(http, "bind", bind_args(p, target))) == {"Error": ""}
    await sched.settle(api)
    before = sched.scheduler.ledger.snapshot()
    assert before == sched.scheduler.ledger.recount()
    await sched.close()
    again = await start_scheduler(api)
    try:
        await again.settle(api)
        assert again.scheduler.ledger.snapshot() == before
    finally:
        await again.close()


async def test_device_cordon_takes_single_devices_out_of_new_allocations(api, sched, http):
    from xpushare.scheduler.cluster import MAX_CORDONED, cordoned_devices

    add_nodes(api, 1, "2x A100-80GB")
    running = create_pod(api, gpu_pod("running", gpu="1", mem="1000"))
    await sched.settle(api)
    with DevicePlugin(api):
        assert (await sched.post(http, "bind", bind_args(running, "node-0"))) == {"Error": ""}
    await sched.settle(api)
    [held] = [d for d, used in used_memory(sched, "node-0").items() if used]
    free = ({"MOCK-node-0-0", "MOCK-node-0-1"} - {held}).pop()
    # The operator cordons the free GPU, live: the running pod stays counted on the other.
    api.modify(
        "nodes",
        "node-0",
        lambda o: o["metadata"]["annotations"].update(
            {"hami.io/device-cordon": f" {free} ,GPU-elsewhere"}
        ),
    )
    await sched.settle(api)
    assert used_memory(sched, "node-0")[held] == 1000
    two = create_pod(api, gpu_pod("two", gpu="2", mem="1000"))
    result = await sched.post(http, "filter", filter_args(two, ["node-0"]))
    assert result["NodeNames"] == []
    why = (result["FailedNodes"] | result["FailedAndUnresolvableNodes"])["node-0"]
    assert "cordoned" in why and "hami.io/device-cordon" in why
    one = create_pod(api, gpu_pod("one", gpu="1", mem="1000"))
    assert (await sched.post(http, "filter", filter_args(one, ["node-0"])))["NodeNames"] == [
        "node-0"
    ]
    placer = sched.scheduler.placer
    decided = placer.decide(placer.request(pod_view(one)), "node-0")
    assert decided.containers[0].devices[0].device_id == held
    # Uncordoned: both fit again.
    api.modify(
        "nodes", "node-0", lambda o: o["metadata"]["annotations"].pop("hami.io/device-cordon")
    )
    await sched.settle(api)
    assert (await sched.post(http, "filter", filter_args(two, ["node-0"])))["NodeNames"] == [
        "node-0"
    ]
    # The value is read bounded.
    assert cordoned_devices("a," * (MAX_CORDONED * 3)) == {"a"}
    assert len(cordoned_devices(",".join(f"d{i}" for i in range(MAX_CORDONED * 2)))) <= MAX_CORDONED
    assert cordoned_devices("x" * 300 + ",ok") == {"ok"}


async def test_namespace_quotas_are_honoured_counted_exported_and_rebuilt(api, sched, http):
    from sched_helpers import MEM

    add_nodes(api, 2, "4x A100-80GB")
    api.put(
        "resourcequotas",
        {
            "metadata": {"name": "gpu", "namespace": "team"},
            "spec": {"hard": {f"limits.{MEM}": "30000", "requests.cpu": "8"}},
        },
    )
    first = create_pod(api, gpu_pod("first", namespace="team", gpu="1", mem="20000"))
    await sched.settle(api)
    with DevicePlugin(api):
        assert (await sched.post(http, "bind", bind_args(first, "node-0"))) == {"Error": ""}
    await sched.settle(api)
    assert sched.scheduler.ledger.namespace_usage("team") == {"mock": (20000, 0)}
    names = ["node-0", "node-1"]
    big = create_pod(api, gpu_pod("big", namespace="team", gpu="1", mem="20000"))
    result = await sched.post(http, "filter", filter_args(big, names))
    assert result["NodeNames"] == []
    why = result["FailedNodes"]["node-1"]
    assert why.startswith("namespace team: ResourceQuota gpu caps limits." + MEM + " at 30000")
    assert "its pods book 20000 MiB and this pod asks 20000 MiB more" in why
    # Within the cap, or in another namespace: fits.
    small = create_pod(api, gpu_pod("small", namespace="team", gpu="1", mem="10000"))
    assert (await sched.post(http, "filter", filter_args(small, names)))["NodeNames"] == names
    other = create_pod(api, gpu_pod("other", namespace="lab", gpu="1", mem="20000"))
    assert (await sched.post(http, "filter", filter_args(other, names)))["NodeNames"] == names
    async with http.get(f"{sched.metrics_url or sched.url}/metrics") as r:
        text = await r.text()
    assert (
        'xpushare_scheduler_namespace_memory_allocated_mib{namespace="team",vendor="mock"} 20000.0'
        in text
    )
    assert (
        'xpushare_scheduler_quota_limit{namespace="team",quota="gpu",resource="limits.'
        + MEM
        + '"} 30000.0'
    ) in text
    assert 'xpushare_scheduler_quota_used{namespace="team",quota="gpu",resource="limits.' in text
    # A restart lists the quotas and the pods again before it decides.
    await sched.close()
    again = await start_scheduler(api)
    try:
        await again.settle(api)
        assert again.scheduler.ledger.namespace_usage("team") == {"mock": (20000, 0)}
        result = await again.post(http, "filter", filter_args(big, names))
        assert result["NodeNames"] == [] and "ResourceQuota gpu" in result["FailedNodes"]["node-0"]
        # Raised live: the watch sees it.
        api.modify(
            "resourcequotas",
            "gpu",
            lambda o: o["spec"]["hard"].update({f"limits.{MEM}": "50000"}),
            namespace="team",
        )
        await again.settle(api)
        assert (await again.post(http, "filter", filter_args(big, names)))["NodeNames"] == names
        api.delete("resourcequotas", "gpu", namespace="team")
        await again.settle(api)
        assert again.scheduler.cluster.quotas.limits("team") == ()
    finally:
        await again.close()

"""Lease leader election between replicas, and readiness that follows it."""

from __future__ import annotations

import asyncio
import contextlib
import datetime

from sched_helpers import add_nodes, start_scheduler

from xpushare.scheduler.kube import Kube, KubeSettings
from xpushare.scheduler.leader import LeaderElector

FAST = {"lease_duration_s": 0.6, "renew_deadline_s": 0.4, "retry_period_s": 0.05}


async def test_one_leader_at_a_time_and_takeover_after_the_lease_lapses(api):
    kube = await Kube.connect(KubeSettings(server=api.url))
    a = LeaderElector(kube, namespace="kube-system", name="x", identity="a", **FAST)
    b = LeaderElector(kube, namespace="kube-system", name="x", identity="b", **FAST)
    task_a = asyncio.create_task(a.run())
    await api.wait_for(lambda: a.is_leader)
    task_b = asyncio.create_task(b.run())
    await asyncio.sleep(0.3)
    assert a.is_leader and not b.is_leader
    lease = api.get("leases", "x", "kube-system")
    assert lease["spec"]["holderIdentity"] == "a"
    # MicroTime: RFC 3339 in UTC with microseconds (the client may write Z as +00:00).
    renewed = datetime.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
    assert renewed.utcoffset() == datetime.timedelta(0)
    # a dies without releasing: b takes over once the lease lapses, as b observes it.
    task_a.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task_a
    await api.wait_for(lambda: b.is_leader, timeout_s=5)
    lease = api.get("leases", "x", "kube-system")
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    task_b.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task_b
    await kube.close()


async def test_only_the_leader_is_ready_and_decides(api, http):
    add_nodes(api, 1)
    leader_settings = {
        "leader.lease_duration_s": 0.6,
        "leader.renew_deadline_s": 0.4,
        "leader.retry_period_s": 0.05,
    }
    first = await start_scheduler(api, leader=True, **leader_settings)
    await api.wait_for(lambda: first.scheduler.is_leader())
    second = await start_scheduler(api, leader=True, **leader_settings)
    try:
        await asyncio.sleep(0.2)
        async with http.get(f"{first.url}/readyz") as r:
            assert r.status == 200
        async with http.get(f"{second.url}/readyz") as r:
            assert r.status == 503 and "leader" in await r.text()
        args = {"PodName": "p", "PodNamespace": "default", "PodUID": "", "Node": "node-0"}
        assert "not the leader" in (await second.post(http, "bind", args))["Error"]
        await first.close()
        await api.wait_for(lambda: second.scheduler.is_leader(), timeout_s=5)
        async with http.get(f"{second.url}/readyz") as r:
            assert r.status == 200
    finally:
        await second.close()


async def test_the_leader_labels_its_pod_and_takes_the_label_off_earlier_leaders(
    api, scheduler_factory, http
):
    from xpushare.scheduler.leaderlabel import LEADER_LABEL
    from xpushare.testing.apiserver import pod as pod_object

    api.put("pods", pod_object("sched-a", namespace="kube-system"))
    old = pod_object("sched-old", namespace="kube-system")
    old["metadata"]["labels"] = {LEADER_LABEL: "true"}  # a frozen or dead earlier leader
    api.put("pods", old)
    sched = await scheduler_factory(
        leader=True, **{"leader.pod": "sched-a", "leader.pod_namespace": "kube-system"}
    )
    await api.wait_for(sched.scheduler.is_leader, 10)
    await api.wait_for(
        lambda: (
            api.get("pods", "sched-a", "kube-system")["metadata"]
            .get("labels", {})
            .get(LEADER_LABEL)
            == "true"
        ),
        10,
    )
    assert LEADER_LABEL not in api.get("pods", "sched-old", "kube-system")["metadata"]["labels"]
    # Ready as a replica (the chart's probe) and as the leader.
    for path in ("/readyz", "/readyz/replica"):
        async with http.get(sched.url + path) as response:
            assert response.status == 200, await response.text()
    await sched.close()
    # Stepping down at shutdown takes the label off.
    labels = api.get("pods", "sched-a", "kube-system")["metadata"].get("labels", {})
    assert LEADER_LABEL not in labels


async def test_a_follower_is_ready_as_a_replica_but_not_as_the_leader(api, scheduler_factory, http):
    api.put(
        "leases",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "xpushare-scheduler", "namespace": "kube-system"},
            "spec": {
                "holderIdentity": "someone-else",
                "leaseDurationSeconds": 3600,
                "renewTime": "2099-01-01T00:00:00.000000Z",
            },
        },
    )
    sched = await scheduler_factory(leader=True)
    async with http.get(sched.url + "/readyz") as response:
        assert response.status == 503
        assert "not the leader" in await response.text()
    async with http.get(sched.url + "/readyz/replica") as response:
        assert response.status == 200
    # Its answer to an extender verb closes the connection, so the caller's next connection
    # goes where the Service sends it now (a Service keeps established connections).
    from sched_helpers import gpu_pod

    body = {"Pod": gpu_pod("p", gpu="1"), "NodeNames": ["node-0"]}
    async with http.post(sched.url + "/filter", json=body) as response:
        assert "not the leader" in (await response.json())["Error"]
        assert response.headers.get("Connection", "").lower() == "close"

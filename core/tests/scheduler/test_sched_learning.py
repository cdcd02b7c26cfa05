"""What the placement policy learns its workload from: pods that fit somewhere, once each.

The learnt workload weighs the fragmentation figure (the web view's, /metrics') and FGD's
choices. One /filter of a pod that fits on no device (8 devices of 90,000 MiB on 80 GB
cards) used to be learnt: a fresh scheduler's figure went from 0 to half the free GPUs.
"""

from __future__ import annotations

from sched_helpers import add_nodes, filter_args, gpu_node, gpu_pod
from web_helpers import policy_fragmentation

from xpushare.scheduling import UNITS


def free_gpus(scheduler) -> float:
    """Free device capacity in GPUs, as the ledger books it (the share one pod could move)."""
    ledger = scheduler.ledger
    free = 0.0
    for name in ledger.nodes:
        for device in ledger.devices(name):
            usage = ledger.device_usage(name, device.vendor)[device.id]
            free += 1 - usage.used_compute_percent / UNITS
    return free


def unplaceable(name: str) -> dict:
    return gpu_pod(name, gpu="8", mem="90000")


async def mixed_fleet(api, sched) -> list[str]:
    """4 nodes of 80 GB cards and 4 of 40 GB cards."""
    names = add_nodes(api, 4)
    for i in range(4):
        api.put("nodes", gpu_node(f"small-{i}", "8x A100-40GB"))
        names.append(f"small-{i}")
    await sched.settle(api)
    return names


async def test_a_fresh_schedulers_figure_stays_put_after_a_pod_that_fits_nowhere(api, sched, http):
    names = await mixed_fleet(api, sched)
    before = policy_fragmentation(sched.scheduler)
    result = await sched.post(http, "filter", filter_args(unplaceable("huge"), names))
    assert result["NodeNames"] == []
    after = policy_fragmentation(sched.scheduler)
    assert abs(after - before) < 0.01 * free_gpus(sched.scheduler), (before, after)
    assert sched.scheduler.placer.policy.learnt.seen == 0


async def test_a_learnt_workloads_figure_moves_less_than_one_percent(api, sched, http):
    names = await mixed_fleet(api, sched)
    for i in range(20):  # 60,000 MiB on one card: the 40 GB cards are fragments for it
        want = gpu_pod(f"big-{i}", gpu="1", mem="60000")
        assert (await sched.post(http, "filter", filter_args(want, names)))["NodeNames"]
    learnt = policy_fragmentation(sched.scheduler)
    assert learnt > 0  # the measure does read the learnt workload
    # kube-scheduler asks again about a Pending pod; 12 times reach the learnt model's
    # refresh after its 32nd pod (xpushare.scheduling.workload: after 1, 2, 4, ... pods).
    for _ in range(12):
        await sched.post(http, "filter", filter_args(unplaceable("huge"), names))
    after = policy_fragmentation(sched.scheduler)
    assert abs(after - learnt) < 0.01 * free_gpus(sched.scheduler), (learnt, after)


async def test_a_pod_asked_about_again_is_learnt_once(api, sched, http):
    names = add_nodes(api, 2)
    await sched.settle(api)
    want = gpu_pod("again", gpu="1", mem="2000")
    for _ in range(10):
        assert (await sched.post(http, "filter", filter_args(want, names)))["NodeNames"]
    assert sched.scheduler.placer.policy.learnt.seen == 1

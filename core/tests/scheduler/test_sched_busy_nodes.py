"""/prioritize spreads a burst while a node's handoff is busy (scheduler/busynodes.py).

A packing policy ranks the same partly used node first for every pod of a burst, and that
node takes one pod's devices at a time (its handoff): the burst queued behind it and timed
out. A node with a bind in flight now scores 0 (the worst that fits), and as before once
its binds are done.
"""

from __future__ import annotations

import asyncio

from sched_helpers import (
    DevicePlugin,
    add_nodes,
    bind_args,
    create_pod,
    filter_args,
    gpu_pod,
)

from xpushare.scheduler.busynodes import BindsInFlight


def test_a_busy_node_scores_0_while_binds_are_in_flight_and_the_same_once_done() -> None:
    binding = BindsInFlight()
    names = ["a", "b", "c"]
    assert binding.spread(names, [10, 7, 0]) == [10, 7, 0]
    binding.started("a")
    binding.started("a")
    binding.started("c")
    assert binding.spread(names, [10, 7, 6]) == [0, 7, 0]
    binding.finished("a")
    assert binding.spread(names, [10, 7, 6]) == [0, 7, 0]
    binding.finished("a")
    binding.finished("c")
    assert not binding
    assert binding.spread(names, [10, 7, 6]) == [10, 7, 6]


def scores(answer: list[dict[str, object]], names: list[str]) -> dict[str, object]:
    """Each candidate's score as kube-scheduler reads the answer (a host left out: 0)."""
    return dict.fromkeys(names, 0) | {entry["Host"]: entry["Score"] for entry in answer}  # type: ignore[misc]


async def test_the_next_pod_of_a_burst_goes_past_a_node_whose_handoff_is_busy(
    api, scheduler_factory, http
):
    sched = await scheduler_factory(**{"bind.wait_s": 5, "placement.policy": "binpack"})
    names = add_nodes(api, 3)  # scores are relative: node-2 stays empty, the worst
    first = create_pod(api, gpu_pod("first", gpu="4"))  # half of node-0's 8 GPUs
    other = create_pod(api, gpu_pod("other", gpu="2"))  # a quarter of node-1's
    await sched.settle(api)
    with DevicePlugin(api):
        assert (await sched.post(http, "bind", bind_args(other, "node-1"))) == {"Error": ""}
    # Bound, its handoff not released yet (its agent has not served it).
    assert (await sched.post(http, "bind", bind_args(first, "node-0"))) == {"Error": ""}
    await sched.settle(api)
    # Binpack packs: the fuller node-0 ranks first for the next pod, node-1 after it.
    nxt = create_pod(api, gpu_pod("next", gpu="1", mem="8000"))
    blocked = create_pod(api, gpu_pod("blocked", gpu="1", mem="8000"))
    await sched.settle(api)
    before = scores(await sched.post(http, "prioritize", filter_args(nxt, names)), names)
    assert before["node-0"] > before["node-1"] > 0, before
    # A bind to node-0 waits for first's handoff: node-0 is busy, and the next pod ranks
    # node-1 first.
    waiting = asyncio.ensure_future(sched.post(http, "bind", bind_args(blocked, "node-0")))
    await asyncio.sleep(0.3)
    assert sched.scheduler.extender.binding.count("node-0") == 1
    during = scores(await sched.post(http, "prioritize", filter_args(nxt, names)), names)
    assert during == {**before, "node-0": 0}, during
    with DevicePlugin(api):
        assert (await waiting) == {"Error": ""}
    await sched.settle(api)
    after = scores(await sched.post(http, "prioritize", filter_args(nxt, names)), names)
    assert not sched.scheduler.extender.binding
    assert after == before, after

"""Issue 31, defect 5: one pod stalled every decision. Each request's cost is bounded now.

A pod past the container bound is refused before any container is read, with the field,
the limit and what to do; so is a candidate list past the node bound. What a pod within the
bounds costs is shown by behaviour, not by timing: the work done (fits computed, the
loop's turns taken between slices), counted from outside the code under test.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
from typing import Any

from sched_helpers import MEM, add_nodes, filter_args, gpu_pod
from test_sched_webhook import admit

#: The documented bounds (xpushare.scheduler.bounds), as numbers: these tests also run
#: against the code before the bounds existed.
MAX_POD_CONTAINERS = 256
MAX_CANDIDATE_NODES = 10_000


def many_containers(name: str, count: int, *, init: int = 0, **limits: str) -> dict[str, Any]:
    """A pod of *count* containers (and *init* init containers) alike, each with *limits*."""
    obj = gpu_pod(name, **limits)
    spec = obj["spec"]
    first = spec["containers"][0]
    spec["containers"] = [dict(copy.deepcopy(first), name=f"c{i}") for i in range(count)]
    if init:
        spec["initContainers"] = [dict(copy.deepcopy(first), name=f"i{i}") for i in range(init)]
    return obj


async def post(http: Any, url: str, body: Any) -> tuple[int, Any]:
    """POST a large JSON body as a stream (aiohttp warns about large bytes bodies)."""
    data = io.BytesIO(json.dumps(body).encode())
    headers = {"Content-Type": "application/json"}
    async with http.post(url, data=data, headers=headers) as r:
        return r.status, await r.json()


async def test_a_pod_past_the_container_bound_fails_every_node_naming_the_limit(api, sched, http):
    names = add_nodes(api, 3)
    await sched.settle(api)
    huge = many_containers("huge", 10_000, gpu="1")
    status, result = await post(http, f"{sched.url}/filter", filter_args(huge, names))
    assert status == 200
    assert result["NodeNames"] == [] and result["Error"] == ""
    assert set(result["FailedAndUnresolvableNodes"]) == set(names)
    message = result["FailedAndUnresolvableNodes"]["node-0"]
    assert "10,000 containers" in message and "spec.containers" in message
    assert f"{MAX_POD_CONTAINERS}" in message and "split" in message
    # /prioritize and /bind say the same, never a device booked.
    status, scores = await post(http, f"{sched.url}/prioritize", filter_args(huge, names))
    assert scores == []  # every candidate 0, which the answer leaves out
    assert sched.scheduler.ledger.entry("default/huge") is None


async def test_init_containers_count_toward_the_bound(api, sched, http):
    names = add_nodes(api, 2)
    await sched.settle(api)
    obj = many_containers("mixed", 200, init=57, gpu="1")
    result = await sched.post(http, "filter", filter_args(obj, names))
    message = result["FailedAndUnresolvableNodes"]["node-1"]
    assert "257 containers" in message and "57 in spec.initContainers" in message


async def test_the_webhook_denies_a_pod_past_the_bound_naming_the_limit(sched, http):
    response = await admit(sched, http, many_containers("huge", 300, gpu="1"))
    assert not response["allowed"]
    message = response["status"]["message"]
    assert "300 containers" in message and f"{MAX_POD_CONTAINERS}" in message
    # A pod that asks for no device is refused too: its containers' isolation rules would
    # have to be read one by one.
    plain = many_containers("plain", 300)
    for c in plain["spec"]["containers"]:
        c["resources"] = {}
    response = await admit(sched, http, plain)
    assert not response["allowed"] and "300 containers" in response["status"]["message"]
    # At the bound it is admitted.
    response = await admit(sched, http, many_containers("ok", MAX_POD_CONTAINERS, gpu="1"))
    assert response["allowed"], response


async def test_too_many_candidate_names_are_refused_naming_the_field(api, sched, http):
    names = add_nodes(api, 2)
    await sched.settle(api)
    pod = gpu_pod("p", gpu="1", mem="1000")
    body = filter_args(pod, names + [f"ghost-{i}" for i in range(100_000)])
    for verb in ("filter", "prioritize"):
        status, answer = await post(http, f"{sched.url}/{verb}", body)
        assert status == 400
        error = answer["Error"]
        assert "NodeNames" in error and f"{MAX_CANDIDATE_NODES:,}" in error
        assert "percentageOfNodesToScore" in error
    nodes = {"Pod": pod, "Nodes": {"items": [{"metadata": {"name": "x"}}] * 10_001}}
    status, answer = await post(http, f"{sched.url}/filter", nodes)
    assert status == 400 and "Nodes.items" in answer["Error"]
    # At the bound the call is answered as before.
    body = filter_args(pod, names + [f"ghost-{i}" for i in range(MAX_CANDIDATE_NODES - 2)])
    status, result = await post(http, f"{sched.url}/filter", body)
    assert status == 200 and result["NodeNames"] == names


async def test_alike_containers_on_alike_nodes_cost_one_fit_per_node_state(api, sched, http):
    """A pod of 200 one-GPU containers against 300 nodes in one state: one fit of the pod,
    not one per node (each node's memo then holds that one answer, the same object)."""
    names = add_nodes(api, 300, spec="16x A100-80GB")
    await sched.settle(api)
    # 16 devices x 10 share slots: the 161st container finds no slot, on every node.
    obj = many_containers("wide", 200, gpu="1", mem="1000")
    result = await sched.post(http, "filter", filter_args(obj, names))
    assert result["NodeNames"] == [] and set(result["FailedNodes"]) == set(names)
    assert "container 'c160'" in result["FailedNodes"]["node-0"]
    ledger = sched.scheduler.ledger
    answers = set()
    for name in names:
        memo = ledger.node(name).memo
        answers |= {id(v) for k, v in memo.items() if k[0] == "xpushare.scheduler.feasible"}
    assert len(answers) == 1


async def test_a_large_filter_gives_the_loop_back_between_slices(api, sched, http):
    """Work counted by the loop's turns: while a /filter of a pod at the bound against
    2,000 nodes is worked out, probes sent one after the other keep being answered (the
    old code held the loop for the whole /filter: a probe or two went through, before it)."""
    names = add_nodes(api, 2_000)
    await sched.settle(api)
    obj = many_containers("distinct", MAX_POD_CONTAINERS, gpu="1")
    for i, c in enumerate(obj["spec"]["containers"]):
        c["resources"]["limits"][MEM] = str(100 + i)  # every demand of its own kind
    task = asyncio.create_task(sched.post(http, "filter", filter_args(obj, names)))
    probes = 0
    while not task.done():
        async with http.get(f"{sched.url}/healthz") as r:
            assert r.status == 200
        probes += 1
    result = await task
    assert result["NodeNames"] == [] and len(result["FailedNodes"]) == len(names)
    # 1,024 units of work a slice: 256 demands x 2,000 nodes are 500 slices.
    assert probes >= 10, probes


async def test_the_loop_lag_is_exported(sched, http):
    """The scheduler samples its own loop's lag (looplag.py) into a histogram on /metrics."""
    count = 0.0
    while count < 3:  # a sample every 20 ms; the test's own timeout bounds the wait
        async with http.get(f"{sched.url}/metrics") as r:
            text = await r.text()
        found = [
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("xpushare_scheduler_loop_lag_seconds_count")
        ]
        assert found, "no xpushare_scheduler_loop_lag_seconds histogram"
        count = found[0]
        await asyncio.sleep(0.02)
    assert 'xpushare_scheduler_loop_lag_seconds_bucket{le="0.05"}' in text

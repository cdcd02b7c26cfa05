"""Hostile or merely varied pods over HTTP: no freeze, no poisoned state, bounded memory.

Each test runs a real scheduler in this process (the same event loop as the test's client:
a handler that blocks the loop blocks the probes too, which is what is measured).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from sched_helpers import MEM, add_nodes, filter_args, gpu_pod
from test_sched_webhook import admit

#: The documented bounds (xpushare.models.request, xpushare.scheduling.workload and .state),
#: as numbers: these tests also run against the code before the bounds existed.
MAX_DEVICE_MEMORY_MIB = 2**24
MAX_LEARNT_SHAPES = 256
MAX_WORKLOAD_SHAPES = 64
MAX_MEMO_ENTRIES = 32


async def timed_get(http, url):
    started = time.perf_counter()
    async with http.get(url) as r:
        assert r.status == 200
    return time.perf_counter() - started


@pytest.mark.parametrize("value", ["1e999999", "1e999999999"])
async def test_a_huge_quantity_is_refused_at_once_and_healthz_stays_fast(api, sched, http, value):
    """It used to run a Decimal ceil on the loop for 26-31 s ("1e999999"), or answer 500
    (decimal.Overflow, "1e999999999")."""
    names = add_nodes(api, 3)
    await sched.settle(api)
    want = gpu_pod("huge", gpu="1", mem=value)

    async def filter_once():
        started = time.perf_counter()
        result = await sched.post(http, "filter", filter_args(want, names))
        return time.perf_counter() - started, result

    task = asyncio.create_task(filter_once())
    await asyncio.sleep(0)  # the /filter request is on its way
    probes = [await timed_get(http, f"{sched.url}/healthz") for _ in range(10)]
    spent, result = await task
    assert spent < 2.0, f"/filter took {spent:.1f} s"
    assert max(probes) < 2.0, f"/healthz took up to {max(probes):.1f} s"
    assert result["NodeNames"] == [] and result["Error"] == ""
    message = result["FailedAndUnresolvableNodes"]["node-0"]
    assert set(result["FailedAndUnresolvableNodes"]) == set(names)
    assert "container 'main'" in message and MEM in message and repr(value) in message
    assert "2^63-1" in message and f"{MAX_DEVICE_MEMORY_MIB:,} MiB" in message
    assert "ask for at most" in message


async def test_the_webhook_refuses_a_huge_quantity_at_once(sched, http):
    started = time.perf_counter()
    response = await admit(sched, http, gpu_pod("huge", gpu="1", mem="1e999999"))
    assert time.perf_counter() - started < 2.0
    assert not response["allowed"]
    assert MEM in response["status"]["message"]


async def test_one_poisonous_pod_does_not_break_later_filters_or_learning(api, sched, http):
    """ "1e5000" used to be learnt as a 5,000-digit integer: the 500 of that pod, then
    failed refreshes of the learnt workload in later requests, until a restart."""
    names = add_nodes(api, 4)
    await sched.settle(api)
    policy = sched.scheduler.placer.policy
    bad = await sched.post(
        http, "filter", filter_args(gpu_pod("bad", gpu="1", mem="1e5000"), names)
    )
    assert bad["NodeNames"] == [] and MEM in bad["FailedAndUnresolvableNodes"]["node-0"]
    for i in range(200):
        want = gpu_pod(f"ok-{i}", gpu="1", mem=str(1000 + 37 * i))
        result = await sched.post(http, "filter", filter_args(want, names))
        assert result["Error"] == "" and result["NodeNames"] == names, result
    assert policy.model_errors == 0
    assert policy.learnt.seen == 200  # the refused pod was never learnt from
    assert 0 < len(policy.workload) <= MAX_WORKLOAD_SHAPES
    assert max(s.demand.memory_mib for s in policy.workload.shapes) <= 2**15


async def test_a_failing_model_refresh_is_counted_and_retried_never_raised(api, sched, http):
    names = add_nodes(api, 2)
    await sched.settle(api)
    policy = sched.scheduler.placer.policy
    real = policy.learnt.workload
    calls = 0

    def broken():
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OverflowError("cannot convert a huge weight")
        return real()

    policy.learnt.workload = broken
    results = [
        await sched.post(http, "filter", filter_args(gpu_pod(f"p{i}", gpu="1", mem="2000"), names))
        for i in range(80)
    ]
    assert all(r["NodeNames"] == names for r in results)
    assert policy.model_errors == 1
    assert calls >= 2 and len(policy.workload) == 1  # retried, and it learnt
    async with http.get(f"{sched.url}/metrics") as r:
        text = await r.text()
    assert 'xpushare_scheduler_model_refresh_failures_total{policy="fgd-cpu"} 1.0' in text


async def test_distinct_shapes_keep_every_cache_at_its_cap(api, scheduler_factory, http):
    """Thousands of distinct requests: learnt shapes, node memos and key tables stay bounded
    (each grew by one entry per distinct request before)."""
    sched = await scheduler_factory()
    names = add_nodes(api, 3)
    await sched.settle(api)
    placer = sched.scheduler.placer
    ledger = placer.ledger
    for i in range(1_500):
        limits = {"gpu": "1", "mem": str(1 + 29 * i % 40_000), "cores": str(1 + i % 99)}
        want = gpu_pod(f"p{i}", **limits)
        if i % 2:
            want["spec"]["containers"][0]["resources"]["limits"]["cpu"] = f"{1 + i}m"
        body = filter_args(want, names)
        assert (await sched.post(http, "filter", body))["Error"] == ""
        scored = await sched.post(http, "prioritize", body)
        assert {s["Host"] for s in scored} <= set(names)  # hosts above the lowest only
    policy = placer.policy
    assert len(policy.workload) <= MAX_WORKLOAD_SHAPES
    assert len(policy.learnt) <= MAX_LEARNT_SHAPES
    sizes = [len(d) for state in ledger.nodes.values() for d in (state.memo, state.shared)]
    assert max(sizes) == MAX_MEMO_ENTRIES  # at the cap (it was reached), never above
    assert policy.model_errors == 0

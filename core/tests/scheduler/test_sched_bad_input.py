"""Bad input over HTTP: oversized bodies, garbage JSON, wrong shapes; never a crash."""

from __future__ import annotations

import pytest
from sched_helpers import add_nodes, create_pod, filter_args, gpu_pod


async def post_raw(http, url, data, headers=None):
    async with http.post(url, data=data, headers=headers or {}) as r:
        return r.status, await r.json()


async def test_oversized_bodies_get_413_with_and_without_a_length(api, scheduler_factory, http):
    sched = await scheduler_factory(**{"server.max_body_bytes": 4096})
    big = b'{"Pod": {"metadata": {"name": "' + b"x" * 8000 + b'"}}}'
    status, body = await post_raw(http, f"{sched.url}/filter", big)
    assert status == 413 and "max_body_bytes" in body["Error"]

    async def chunks():
        for _ in range(10):
            yield b" " * 1000
        yield b"{}"

    status, body = await post_raw(http, f"{sched.url}/bind", chunks())
    assert status == 413
    # Still serving.
    add_nodes(api, 1)
    await sched.settle(api)
    want = create_pod(api, gpu_pod("want", gpu="1"))
    assert (await sched.post(http, "filter", filter_args(want, ["node-0"])))["NodeNames"] == [
        "node-0"
    ]


@pytest.mark.parametrize(
    ("verb", "data", "words"),
    [
        ("filter", b"{not json", "not valid JSON"),
        ("filter", b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        ("filter", b'{"Pod": 5, "NodeNames": []}', "no Pod"),
        ("filter", b'{"Pod": {}, "NodeNames": "node-0"}', "NodeNames"),
        ("filter", b'{"Pod": {"spec": {"containers": 3}}, "NodeNames": []}', "malformed"),
        ("prioritize", b'{"Pod": {}, "Nodes": 7}', "NodeList"),
        ("bind", b'{"PodName": "", "Node": "n"}', "PodName"),
        ("bind", b"\xff\xfe", "not valid JSON"),
    ],
)
async def test_garbage_is_answered_with_a_clear_error(sched, http, verb, data, words):
    status, body = await post_raw(http, f"{sched.url}/{verb}", data)
    assert status == 400
    assert words in body["Error"]
    # The process is fine afterwards.
    async with http.get(f"{sched.url}/healthz") as r:
        assert r.status == 200


async def test_probes_and_metrics(api, sched, http):
    add_nodes(api, 1)
    await sched.settle(api)
    async with http.get(f"{sched.url}/readyz") as r:
        assert r.status == 200
    want = create_pod(api, gpu_pod("want", gpu="1"))
    await sched.post(http, "filter", filter_args(want, ["node-0"]))
    async with http.get(f"{sched.url}/metrics") as r:
        text = await r.text()
    assert 'xpushare_scheduler_request_duration_seconds_count{verb="filter"} 1.0' in text
    assert 'xpushare_scheduler_decisions_total{result="fit",verb="filter"} 1.0' in text
    assert 'xpushare_scheduler_device_memory_capacity_mib{device="MOCK-node-0-0"' in text
    assert "xpushare_scheduler_cache_synced 1.0" in text


async def test_not_ready_until_synced(api, scheduler_factory, http):
    api.inject("GET", r"/api/v1/pods$", 503, times=1000)
    sched = await scheduler_factory(sync=False)
    async with http.get(f"{sched.url}/readyz") as r:
        assert r.status == 503 and "synced" in await r.text()
    result = await sched.post(http, "filter", filter_args(gpu_pod("p", gpu="1"), ["a"]))
    assert "has not finished reading" in result["Error"]
    api._injections.clear()
    await sched.scheduler.wait_synced(10)
    async with http.get(f"{sched.url}/readyz") as r:
        assert r.status == 200

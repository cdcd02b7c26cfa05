"""The web view's allocated-versus-used history: range queries against a fake Prometheus."""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from sched_helpers import add_nodes
from web_helpers import WEB, fake_prometheus, web_url

from xpushare.scheduler.web.history import MAX_MINUTES, MAX_POINTS, MIN_MINUTES, step_for

ALLOCATED = "xpushare_scheduler_device_memory_allocated_mib"
USED = "xpushare_device_memory_used_bytes"


async def _get(http, url):
    async with http.get(url) as response:
        return response.status, await response.json()


def _matrix(values):
    return {"status": "success", "data": {"resultType": "matrix", "result": values}}


async def _history_with(api, scheduler_factory, http, handler, query="minutes=60"):
    add_nodes(api, 1)
    runner, url = await fake_prometheus("/api/v1/query_range", handler)
    try:
        sched = await scheduler_factory(**WEB, **{"web.prometheus_url": url})
        await sched.settle(api)
        return await _get(http, f"{web_url(sched)}/api/v1/history?{query}")
    finally:
        await runner.cleanup()


async def test_history_asks_both_sums_with_a_bounded_step_and_returns_their_series(
    api, scheduler_factory, http
):
    asked = []

    async def answer(request):
        asked.append(dict(request.query))
        start, end = float(request.query["start"]), float(request.query["end"])
        step = int(request.query["step"])
        points = [[start + i * step, str(1000.0 * (i + 1))] for i in range(3)]
        if USED in request.query["query"]:
            # Prometheus writes NaN and +Inf as strings; a point out of the range, a
            # malformed pair and a boolean time are not points either.
            points = [
                [start, "2048"],
                [start + step, "NaN"],
                [start + 2 * step, "+Inf"],
                [end + 10 * step, "1"],
                [start + 3 * step],
                [True, "5"],
                [end, "4096.5"],
            ]
        return web.json_response(_matrix([{"metric": {}, "values": points}]))

    status, body = await _history_with(api, scheduler_factory, http, answer)
    assert status == 200, body
    assert [ALLOCATED in a["query"] for a in asked] == [True, False]
    assert USED in asked[1]["query"] and "/ 1048576" in asked[1]["query"]
    assert all(a["query"].startswith("sum(max by (node") for a in asked)
    step = step_for(60)
    assert step == 16 and {a["step"] for a in asked} == {"16"}
    start, end = float(asked[0]["start"]), float(asked[0]["end"])
    assert end - start == 3600 and end % step == 0
    assert (end - start) / step + 1 <= MAX_POINTS
    assert body["configured"] is True and body["step_s"] == 16
    assert (body["start"], body["end"]) == (start, end)
    assert body["series"]["allocated_mib"] == [
        [start, 1000.0],
        [start + step, 2000.0],
        [start + 2 * step, 3000.0],
    ]
    assert body["series"]["used_mib"] == [[start, 2048.0], [end, 4096.5]]


async def test_an_empty_prometheus_gives_empty_series(api, scheduler_factory, http):
    async def answer(request):
        return web.json_response(_matrix([]))

    status, body = await _history_with(api, scheduler_factory, http, answer, query="")
    assert status == 200
    assert body["minutes"] == 60
    assert body["series"] == {"allocated_mib": [], "used_mib": []}


def test_every_range_has_at_most_240_points():
    for minutes in range(MIN_MINUTES, MAX_MINUTES + 1):
        step = step_for(minutes)
        assert step >= 15
        assert minutes * 60 // step + 1 <= MAX_POINTS, minutes


@pytest.mark.parametrize("minutes", ["0", "4", str(MAX_MINUTES + 1), "abc", "-5", "1e3", "60.5"])
async def test_a_range_out_of_bounds_is_refused_naming_the_field(
    api, scheduler_factory, http, minutes
):
    async def answer(request):
        raise AssertionError("Prometheus must not be asked")

    status, body = await _history_with(
        api, scheduler_factory, http, answer, query=f"minutes={minutes}"
    )
    assert status == 400
    assert body["error"].startswith("minutes: ")
    assert str(MIN_MINUTES) in body["error"] and str(MAX_MINUTES) in body["error"]


async def test_without_prometheus_the_answer_names_the_setting(api, scheduler_factory, http):
    add_nodes(api, 1)
    sched = await scheduler_factory(**WEB)
    await sched.settle(api)
    status, body = await _get(http, f"{web_url(sched)}/api/v1/history")
    assert status == 200
    assert body["configured"] is False
    assert "web.prometheus_url" in body["message"]


async def test_prometheus_down_is_a_clean_error(api, scheduler_factory, http):
    add_nodes(api, 1)
    sched = await scheduler_factory(
        **WEB, **{"web.prometheus_url": "http://127.0.0.1:9", "web.prometheus_timeout_s": 1}
    )
    await sched.settle(api)
    status, body = await _get(http, f"{web_url(sched)}/api/v1/history")
    assert status == 503
    assert "not reachable" in body["error"]


#: Answers that are not a range query's, as (HTTP status, body).
GARBAGE = {
    "not json": (200, b"<html>proxy error</html>"),
    "a list": (200, json.dumps([1, 2]).encode()),
    "no data": (200, json.dumps({"status": "error", "error": "bad"}).encode()),
    "result not a list": (
        200,
        json.dumps({"data": {"resultType": "matrix", "result": "x"}}).encode(),
    ),
    "a vector": (200, json.dumps({"data": {"resultType": "vector", "result": []}}).encode()),
    "two series": (200, json.dumps(_matrix([{"values": []}, {"values": []}])).encode()),
    "values not a list": (200, json.dumps(_matrix([{"values": "1,2,3"}])).encode()),
    "HTTP 422": (422, json.dumps({"status": "error"}).encode()),
    # Past live.py's bound on an answer's size (1 MiB).
    "too large": (200, b"[" + b"0," * 600_000 + b"0]"),
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
async def test_prometheus_garbage_is_a_clean_error(api, scheduler_factory, http, kind):
    async def answer(request):
        status, body = GARBAGE[kind]
        return web.Response(body=body, status=status, content_type="application/json")

    status, body = await _history_with(api, scheduler_factory, http, answer)
    assert status == 503, body
    assert "Prometheus" in body["error"]

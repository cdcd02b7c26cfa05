"""The web view's JSON API against a real scheduler on the fake API server.

Every figure asserted is computed here from the ledger's own reads (web_helpers), or asked of
the extender over HTTP, or of ``xpushare fit``: never from the view's code.
"""

from __future__ import annotations

import gzip
import json

import aiohttp
import pytest
from aiohttp import web
from sched_helpers import add_nodes, bind_args, create_pod, filter_args, gpu_node, gpu_pod
from web_helpers import (
    WEB,
    fake_prometheus,
    fit_cli,
    fit_document,
    ledger_sums,
    policy_fragmentation,
    web_url,
)

from xpushare.plugins.builtin import mock
from xpushare.scheduler import load_config
from xpushare.scheduler.web.details import event_rows
from xpushare.scheduler.web.explain import HEADLINE_REASON_CHARS, headline


async def _fleet_nodes(api, scheduler_factory):
    add_nodes(api, 2)
    api.put("nodes", gpu_node("small-0", "4x V100-32GB"))
    api.modify("nodes", "small-0", lambda o: o["metadata"]["labels"].update(pool="old"))
    sched = await scheduler_factory(**WEB)
    await sched.settle(api)
    return sched


async def _bind(api, sched, http, name, node, **limits):
    p = create_pod(api, gpu_pod(name, **limits))
    assert (await sched.post(http, "bind", bind_args(p, node))) == {"Error": ""}
    await sched.settle(api)
    return p


async def _get(http, url, **kwargs):
    async with http.get(url, **kwargs) as response:
        return response.status, (await response.json()) if response.status != 304 else None


def test_web_view_is_off_and_on_localhost_by_default():
    config = load_config(environ={})
    assert config.web.enabled is False
    assert config.web.host == "127.0.0.1"
    assert config.web.auth.mode == "none"


async def test_web_view_listens_only_when_enabled(api, scheduler_factory):
    sched = await scheduler_factory()
    assert "web" not in sched.scheduler.ports
    on = await scheduler_factory(**WEB)
    assert on.scheduler.ports["web"] > 0


async def test_fleet_numbers_equal_the_ledgers(api, scheduler_factory, http):
    sched = await _fleet_nodes(api, scheduler_factory)
    await _bind(api, sched, http, "a", "node-0", gpu="2", mem="30000", cores="40")
    await _bind(api, sched, http, "b", "small-0", gpu="1", mem="8000", cores="25")
    status, fleet = await _get(http, f"{web_url(sched)}/api/v1/fleet")
    assert status == 200
    expected = ledger_sums(sched.scheduler.ledger)
    got = {(s["vendor"], s["model"]): s for s in fleet["summary"]}
    assert set(got) == set(expected) == {("mock", "A100-80GB"), ("mock", "V100-32GB")}
    for key, sums in expected.items():
        for field, value in sums.items():
            assert got[key][field] == value, (key, field)
    assert got[("mock", "A100-80GB")]["memory_used_mib"] == 60000
    assert got[("mock", "V100-32GB")]["compute_used_percent"] == 25
    assert fleet["total_nodes"] == fleet["shown_nodes"] == 3
    # Fragmentation: the placement policy's own measure, summed.
    assert fleet["fragmentation_measured"] is True
    total = sum(s["fragmentation_gpus"] for s in fleet["summary"])
    assert total == pytest.approx(policy_fragmentation(sched.scheduler), abs=0.01)
    # Each device row: the ledger's usage of that device, by index.
    columns = fleet["device_columns"]
    ledger = sched.scheduler.ledger
    for node in fleet["nodes"]:
        usage = ledger.device_usage(node["name"], "mock")
        by_index = {d.index: usage[d.id] for d in ledger.devices(node["name"])}
        for _, _, _, rows in node["groups"]:
            for row in rows:
                r = dict(zip(columns, row, strict=True))
                assert r["memory_used_mib"] == by_index[r["index"]].used_memory_mib
                assert r["compute_used_percent"] == by_index[r["index"]].used_compute_percent
                assert r["slots_used"] == by_index[r["index"]].used_slots


async def test_fleet_etag_answers_304_until_a_bind_changes_it(api, scheduler_factory, http):
    sched = await _fleet_nodes(api, scheduler_factory)
    url = f"{web_url(sched)}/api/v1/fleet"
    async with http.get(url) as response:
        tag = response.headers["ETag"]
        assert "app;dur=" in response.headers["Server-Timing"]
    status, _ = await _get(http, url, headers={"If-None-Match": tag})
    assert status == 304
    await _bind(api, sched, http, "a", "node-1", gpu="1", mem="10000", cores="10")
    async with http.get(url, headers={"If-None-Match": tag}) as response:
        assert response.status == 200
        fleet = await response.json()
        assert response.headers["ETag"] != tag
    used = {s["model"]: s["memory_used_mib"] for s in fleet["summary"]}
    assert used["A100-80GB"] == 10000


async def test_fleet_filters_by_vendor_model_label_and_name(api, scheduler_factory, http):
    sched = await _fleet_nodes(api, scheduler_factory)
    base = f"{web_url(sched)}/api/v1/fleet"
    _, by_label = await _get(http, base, params={"label": "pool=old"})
    assert [n["name"] for n in by_label["nodes"]] == ["small-0"]
    assert [s["model"] for s in by_label["summary"]] == ["V100-32GB"]
    _, by_key = await _get(http, base, params={"label": "pool"})
    assert [n["name"] for n in by_key["nodes"]] == ["small-0"]
    _, by_model = await _get(http, base, params={"model": "A100-80GB"})
    assert sorted(n["name"] for n in by_model["nodes"]) == ["node-0", "node-1"]
    assert by_model["summary"][0]["devices"] == 16
    # The choices stay the whole fleet's, so a filter can be changed from the page.
    assert len(by_model["models"]) == 2
    _, by_name = await _get(http, base, params={"node": "node-1"})
    assert [n["name"] for n in by_name["nodes"]] == ["node-1"]
    _, none = await _get(http, base, params={"vendor": "acme"})
    assert none["nodes"] == [] and none["summary"] == []
    status, error = await _get(http, base, params={"label": "=x"})
    assert status == 400 and "label" in error["error"]
    status, error = await _get(http, base, params={"model": "x" * 1000})
    assert status == 400 and "model" in error["error"]


async def test_node_page_lists_shares_with_pod_container_and_since(api, scheduler_factory, http):
    sched = await _fleet_nodes(api, scheduler_factory)
    await _bind(api, sched, http, "a", "node-0", gpu="2", mem="30000", cores="40")
    status, node = await _get(http, f"{web_url(sched)}/api/v1/nodes/node-0")
    assert status == 200
    assert len(node["devices"]) == 8 and all(d["healthy"] for d in node["devices"])
    shares = node["shares"]
    assert len(shares) == 2
    assert {(s["namespace"], s["pod"], s["container"]) for s in shares} == {
        ("default", "a", "main")
    }
    assert {(s["memory_mib"], s["compute_percent"]) for s in shares} == {(30000, 40)}
    assert all(s["since"] > 0 and not s["reserved"] for s in shares)
    # The Node's allocatable (64 CPUs, 256 GiB in the fake API server's nodes); it showed
    # "CPU 0 / ? m": the scheduler never recorded it. Its use is kube-scheduler's to book.
    assert node["cpu_milli"] == {"allocatable": 64_000, "used": None}
    assert node["memory_mib"] == {"allocatable": 256 * 1024, "used": None}
    used = {d["id"]: d["memory_used_mib"] for d in node["devices"]}
    assert sorted(used[s["device_id"]] for s in shares) == [30000, 30000]
    assert node["live"] is None and "Prometheus" in node["live_error"]
    status, _ = await _get(http, f"{web_url(sched)}/api/v1/nodes/nope")
    assert status == 404


async def test_pending_pod_explanation_is_filters_and_fits(api, scheduler_factory, http):
    sched = await _fleet_nodes(api, scheduler_factory)
    await _bind(api, sched, http, "a", "node-0", gpu="1", mem="70000", cores="10")
    big = create_pod(api, gpu_pod("big", gpu="1", mem="60000", cores="10"))
    names = ["node-0", "node-1", "small-0"]
    # kube-scheduler asks /filter; the event it records is shown on the page too.
    real = await sched.post(http, "filter", filter_args(big, names))
    await sched.scheduler.events.flush()
    status, page = await _get(http, f"{web_url(sched)}/api/v1/pods/default/big")
    assert status == 200 and page["state"] == "pending"
    x = page["explanation"]
    assert x["filter"] == real
    assert x["nodes_considered"] == 3
    # node-0 and node-1 have free 80 GB devices; the 32 GB ones of small-0 are too small.
    assert x["summary"].startswith("2/3 nodes fit: 1 x ")
    assert "not enough free device memory" in x["summary"]
    assert x["headline"] == "2/3 nodes fit; 1 does not: not enough free device memory (1)"
    policy = sched.scheduler.placer.policy.name
    ledger = sched.scheduler.ledger
    explained = [e for g in x["groups"] for e in g["explanations"]]
    assert {e["node"] for e in explained} == {"small-0"}
    for e in explained:
        assert e == fit_cli(fit_document(ledger, e["node"], api.get("pods", "big"), policy))
    assert sorted(r["node"] for r in x["ranking"]) == ["node-0", "node-1"]
    reasons = [e["reason"] for e in page["events"]]
    assert reasons == []  # a pod that fits somewhere gets no NoDeviceFit event
    huge = create_pod(api, gpu_pod("huge", gpu="1", mem="90000"))
    await sched.post(http, "filter", filter_args(huge, names))
    await sched.scheduler.events.flush()
    _, page = await _get(http, f"{web_url(sched)}/api/v1/pods/default/huge")
    assert [e["reason"] for e in page["events"]] == ["NoDeviceFit"]
    # No device is that large: the page says so, not "not enough free device memory".
    x = page["explanation"]
    largest = max(d.memory_mib for n in names for d in sched.scheduler.ledger.devices(n))
    assert x["too_large"] == [
        f"90,000 MiB per mock device is larger than any mock device (the largest books "
        f"{largest:,} MiB)"
    ]
    assert x["summary"] == "no node can ever hold this pod: " + x["too_large"][0]
    assert page["events"][0]["message"].startswith("no node has the devices this pod asks for")


async def test_refusals_are_grouped_by_reason_with_counts(api, scheduler_factory, http):
    """Nodes refused for one reason in differing words ("4/8 devices usable", "6/8 devices
    usable") were listed once per wording: one entry per reason now, counts summed."""
    add_nodes(api, 4)
    sched = await scheduler_factory(**WEB)
    await sched.settle(api)
    for i, used in enumerate((2, 4, 6, 8)):
        await _bind(api, sched, http, f"p{i}", f"node-{i}", gpu=str(used), mem="60000")
    want = gpu_pod("wide", gpu="8", mem="30000")
    async with http.post(f"{web_url(sched)}/api/v1/whatif", json=want) as r:
        x = await r.json()
    assert x["filter"]["NodeNames"] == []
    assert len(x["groups"]) == 4  # four wordings
    [entry] = x["reasons"]
    assert entry["reason"] == "not enough free device memory"
    assert entry["count"] == 4 == sum(g["count"] for g in x["groups"])
    assert sorted(entry["nodes"]) == ["node-0", "node-1", "node-2", "node-3"]
    # The one line names the reason once, where /filter's words repeat it per wording.
    assert x["headline"] == "0/4 nodes fit; 4 do not: not enough free device memory (4)"
    assert x["summary"].count("not enough free device memory") == 4


def test_the_headline_names_three_reasons_and_cuts_a_long_one() -> None:
    reasons = [
        {"reason": "x" * 500, "count": 5},
        *({"reason": f"reason {i}", "count": 4 - i} for i in range(4)),
    ]
    line = headline(0, 15, reasons)
    assert line.startswith("0/15 nodes fit; 15 do not: " + "x" * (HEADLINE_REASON_CHARS - 1))
    assert line.endswith("… (5), reason 0 (4), reason 1 (3), 2 more reasons below")
    assert headline(3, 3, []) == "3/3 nodes fit"


def test_the_same_event_is_one_row_with_its_counts_summed() -> None:
    """A Pending pod refused in the same words every minute was one row per minute."""

    def event(time: str, message: str, count: object = 1) -> dict:
        return {
            "type": "Warning",
            "reason": "NoDeviceFit",
            "message": message,
            "count": count,
            "lastTimestamp": time,
            "source": {"component": "xpushare-scheduler"},
        }

    long = "no node has the devices this pod asks for: " + "0/8 devices usable; " * 40
    rows = event_rows(
        [
            event("2026-01-01T00:02:00Z", long),
            event("2026-01-01T00:00:00Z", long, 2),
            event("2026-01-01T00:01:00Z", "another message"),
            event("2026-01-01T00:03:00Z", long, "hostile"),
        ]
    )
    assert [(r["message"], r["count"], r["time"]) for r in rows] == [
        ("another message", 1, "2026-01-01T00:01:00Z"),
        (long, 4, "2026-01-01T00:03:00Z"),
    ]


async def test_the_fleet_answer_is_compressed_for_clients_that_accept_it(
    api, scheduler_factory, http
):
    sched = await _fleet_nodes(api, scheduler_factory)
    url = f"{web_url(sched)}/api/v1/fleet"
    async with aiohttp.ClientSession(auto_decompress=False) as raw:
        async with raw.get(url, headers={"Accept-Encoding": "gzip"}) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            zipped = await r.read()
        async with raw.get(url, headers={"Accept-Encoding": "identity"}) as r:
            assert "Content-Encoding" not in r.headers
            plain = json.loads(await r.read())
    unzipped = json.loads(gzip.decompress(zipped))
    unzipped.pop("status"), plain.pop("status")
    assert unzipped == plain and len(zipped) < len(json.dumps(plain))


async def test_the_fleet_answer_names_the_workload_it_measured_against(
    api, scheduler_factory, http
):
    sched = await _fleet_nodes(api, scheduler_factory)
    names = ["node-0", "node-1", "small-0"]
    _, fleet = await _get(http, f"{web_url(sched)}/api/v1/fleet")
    assert fleet["workload"] == {"learnt": True, "pods": 0, "shapes": 0, "top": []}
    await sched.post(http, "filter", filter_args(gpu_pod("x", gpu="8", mem="90000"), names))
    await sched.post(http, "filter", filter_args(gpu_pod("y", gpu="2", mem="20480"), names))
    _, fleet = await _get(http, f"{web_url(sched)}/api/v1/fleet")
    # The pod that fits nowhere is not in it.
    assert fleet["workload"] == {
        "learnt": True,
        "pods": 1,
        "shapes": 1,
        "top": [["2 x 20 GiB (mock)", 1.0]],
    }
    assert [n["pods"] for n in fleet["nodes"]] == [0, 0, 0]


async def test_bound_pod_shows_its_assignment(api, scheduler_factory, http):
    sched = await _fleet_nodes(api, scheduler_factory)
    await _bind(api, sched, http, "a", "small-0", gpu="1", mem="8000", cores="25")
    await sched.scheduler.events.flush()
    status, page = await _get(http, f"{web_url(sched)}/api/v1/pods/default/a")
    assert status == 200 and page["state"] in ("bound", "running")
    a = page["assignment"]
    assert a["node"] == "small-0"
    [device] = a["containers"][0]["devices"]
    assert (device["memory_mib"], device["compute_percent"], device["model"]) == (
        8000,
        25,
        "V100-32GB",
    )
    assert [e["reason"] for e in page["events"]] == ["DevicesAssigned"]
    status, _ = await _get(http, f"{web_url(sched)}/api/v1/pods/default/absent")
    assert status == 404


@pytest.mark.parametrize(
    "limits",
    [
        {"gpu": "1", "mem": "20000", "cores": "30"},
        {"gpu": "1", "mem": "90000"},
        {"gpu": "5"},
        {"gpu": "1", "pct": "250"},
        {},
    ],
    ids=["fits", "too-big", "too-many", "invalid", "no-devices"],
)
async def test_whatif_equals_filter_and_changes_nothing(api, scheduler_factory, http, limits):
    sched = await _fleet_nodes(api, scheduler_factory)
    await _bind(api, sched, http, "a", "node-0", gpu="1", mem="70000", cores="10")
    spec = gpu_pod("probe", **limits)
    learnt = sched.scheduler.placer.policy.learnt.seen
    await sched.scheduler.events.flush()  # the bind's own event is written in the background
    events = len(api.writes("events"))
    async with http.post(f"{web_url(sched)}/api/v1/whatif", json=spec) as response:
        assert response.status == 200, await response.text()
        x = await response.json()
    assert sched.scheduler.placer.policy.learnt.seen == learnt  # nothing learnt from a look
    await sched.scheduler.events.flush()
    assert len(api.writes("events")) == events  # and no event recorded
    assert api.get("pods", "probe") is None
    real = await sched.post(http, "filter", filter_args(spec, list(sched.scheduler.ledger.nodes)))
    assert x["filter"] == real
    if real["NodeNames"] and limits:
        assert x["best"]["fits"] and x["best"]["node"] == x["ranking"][0]["node"]


async def test_whatif_takes_yaml_and_refuses_bad_bodies(api, scheduler_factory, http):
    sched = await _fleet_nodes(api, scheduler_factory)
    url = f"{web_url(sched)}/api/v1/whatif"
    manifest = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: y}\nspec:\n  containers:\n"
        "  - name: main\n    resources: {limits: {xpushare.io/mock-gpu: '1'}}\n"
    )
    async with http.post(url, data=manifest) as response:
        assert response.status == 200
        assert (await response.json())["ranking"]
    cases = [
        (b"a: &x [1]\nb: *x\n", 400, "anchors"),
        (b"[1, 2]", 400, "object"),
        (b"kind: Deployment\n", 400, "kind"),
        (b"\xff\xfe", 400, "UTF-8"),
        (b"{" * 300_000, 413, "larger"),
        (json.dumps({"spec": {"containers": "x"}}).encode(), 400, "malformed"),
    ]
    for body, status, words in cases:
        async with http.post(url, data=body) as response:
            assert response.status == status, body[:40]
            assert words in (await response.json())["error"]


async def test_search_finds_nodes_bound_and_pending_pods(api, scheduler_factory, http):
    sched = await _fleet_nodes(api, scheduler_factory)
    await _bind(api, sched, http, "train-a", "node-0", gpu="1", mem="1000")
    waiting = gpu_pod("train-b", gpu="1")
    waiting["spec"]["schedulerName"] = "xpushare-scheduler"
    create_pod(api, waiting)
    other = gpu_pod("train-c", gpu="1")
    other["spec"]["schedulerName"] = "default-scheduler"
    create_pod(api, other)
    _, found = await _get(http, f"{web_url(sched)}/api/v1/search", params={"q": "TRAIN"})
    assert [(p["pod"], p["node"]) for p in found["pods"]] == [("train-a", "node-0")]
    assert [p["pod"] for p in found["pending"]] == ["train-b"]
    _, found = await _get(http, f"{web_url(sched)}/api/v1/search", params={"q": "small"})
    assert found["nodes"] == ["small-0"] and found["pods"] == []
    status, _ = await _get(http, f"{web_url(sched)}/api/v1/search", params={"q": "x" * 400})
    assert status == 400


async def test_openapi_describes_every_route(api, scheduler_factory, http):
    sched = await _fleet_nodes(api, scheduler_factory)
    _, doc = await _get(http, f"{web_url(sched)}/api/v1/openapi.json")
    assert doc["openapi"].startswith("3.")
    app = sched.scheduler.web.app()
    served = {
        (r.method.lower(), r.resource.canonical)
        for r in app.router.routes()
        if r.resource is not None
        and r.resource.canonical.startswith("/api/")
        and r.method != "HEAD"
    }
    described = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert served == described


async def test_page_and_assets_are_served_from_the_package_with_a_strict_csp(
    api, scheduler_factory, http
):
    sched = await _fleet_nodes(api, scheduler_factory)
    async with http.get(web_url(sched) + "/") as response:
        html = await response.text()
        csp = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "/static/app.js" in html and "http" not in html.replace("http-equiv", "")
    for name in ("app.js", "style.css"):
        async with http.get(f"{web_url(sched)}/static/{name}") as response:
            assert response.status == 200
            text = await response.text()
            assert "https://" not in text and "http://" not in text


async def test_node_page_shows_live_usage_from_prometheus(api, scheduler_factory, http):
    add_nodes(api, 1)
    device = mock.parse_spec("8x A100-80GB", "node-0")[0].id
    queries = []

    async def answer(request):
        query = request.query["query"]
        queries.append(query)
        labels = {"node": "node-0", "device": device}
        result = []
        if query.startswith("xpushare_device_utilization_ratio"):
            result = [{"metric": labels, "value": [1, "0.5"]}]
        if query.startswith("xpushare_container_memory_used_bytes"):
            who = {"namespace": "ns", "pod": "p", "container": "c"}
            result = [{"metric": {**labels, **who}, "value": [1, "1048576"]}]
        if query.startswith("xpushare_device_power_watts"):
            result = [{"metric": labels, "value": [1, "not a number"]}, "garbage"]
        return web.json_response({"status": "success", "data": {"result": result}})

    runner, url = await fake_prometheus("/api/v1/query", answer)
    try:
        sched = await scheduler_factory(**WEB, **{"web.prometheus_url": url})
        await sched.settle(api)
        _, node = await _get(http, f"{web_url(sched)}/api/v1/nodes/node-0")
        assert node["live_error"] is None
        assert queries[0] == 'xpushare_device_utilization_ratio{node="node-0"}'
        assert node["live"]["devices"] == {device: {"utilization": 0.5}}
        [container] = node["live"]["containers"]
        assert (container["pod"], container["memory_used_bytes"]) == ("p", 1048576)
    finally:
        await runner.cleanup()


async def test_prometheus_down_leaves_the_page_with_the_reason(api, scheduler_factory, http):
    add_nodes(api, 1)
    sched = await scheduler_factory(
        **WEB, **{"web.prometheus_url": "http://127.0.0.1:9", "web.prometheus_timeout_s": 1}
    )
    await sched.settle(api)
    status, node = await _get(http, f"{web_url(sched)}/api/v1/nodes/node-0")
    assert status == 200 and node["live"] is None
    assert "not reachable" in node["live_error"]
    assert len(node["devices"]) == 8


async def test_token_mode_reviews_the_token_and_the_users_access(api, scheduler_factory, http):
    add_nodes(api, 1)
    allowed_users = {"alice"}
    tokens = {"good": "alice", "other": "bob"}
    seen_specs = []

    def token_review(body):
        user = tokens.get(body["spec"]["token"])
        status = {"authenticated": True, "user": {"username": user, "groups": ["devs"]}}
        return {**body, "status": status if user else {"authenticated": False, "error": "bad"}}

    def access_review(body):
        seen_specs.append(body["spec"])
        return {**body, "status": {"allowed": body["spec"]["user"] in allowed_users}}

    api.reviewers["tokenreviews"] = token_review
    api.reviewers["subjectaccessreviews"] = access_review
    sched = await scheduler_factory(**WEB, **{"web.auth.mode": "token"})
    await sched.settle(api)
    url = f"{web_url(sched)}/api/v1/fleet"

    async def status_of(token=None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with http.get(url, headers=headers) as response:
            return response.status

    assert await status_of() == 401
    assert await status_of("nope") == 401
    assert await status_of("other") == 403
    assert await status_of("good") == 200
    assert seen_specs[-1]["nonResourceAttributes"] == {"path": "/xpushare/web", "verb": "get"}
    assert seen_specs[-1]["groups"] == ["devs"]
    reviews = sched.scheduler.web.auth.reviews
    assert await status_of("good") == 200
    assert sched.scheduler.web.auth.reviews == reviews  # answered from the cache
    # The page itself is public (it holds no data); the data needs the token.
    async with http.get(web_url(sched) + "/") as response:
        assert response.status == 200
    # An API server that cannot review refuses: 503, never a way in.
    api.reviewers.clear()
    api.inject("POST", r"tokenreviews", status=500, times=5)
    assert await status_of("fresh") == 503


async def test_garbled_authorization_headers_are_refused(api, scheduler_factory, http):
    add_nodes(api, 1)
    sched = await scheduler_factory(**WEB, **{"web.auth.mode": "token"})
    url = f"{web_url(sched)}/api/v1/fleet"
    for header in ("Basic abc", "Bearer ", "Bearer " + "x" * 9000):
        async with http.get(url, headers={"Authorization": header}) as response:
            # (aiohttp refuses a header line over 8 KB itself, with 400)
            assert response.status in (401, 400 if len(header) > 8000 else 401)
    assert sched.scheduler.web.auth.reviews == 0


async def test_unknown_routes_are_404(api, scheduler_factory, http):
    sched = await scheduler_factory(**WEB)
    async with http.get(f"{web_url(sched)}/static/../app.py") as response:
        assert response.status == 404
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{web_url(sched)}/api/v1/nodes") as response,
    ):
        assert response.status == 404


async def test_every_node_digest_is_built_at_the_first_sync(api, scheduler_factory):
    # The first page then pays only for nodes that changed since (160 ms at 5,000 nodes
    # when the first call built them all).
    sched = await _fleet_nodes(api, scheduler_factory)
    web_view = sched.scheduler.web
    assert web_view is not None
    assert set(web_view.fleet._digests) == set(sched.scheduler.ledger.nodes)


@pytest.mark.parametrize("pods_first", [False, True])
async def test_the_digests_are_built_by_whichever_list_completes_the_sync(api, pods_first):
    from sched_helpers import mock_host

    from xpushare.scheduler import Scheduler
    from xpushare.scheduler.kube import Kube, KubeSettings

    config = load_config(environ={}, overrides={"leader.enabled": False, **WEB})
    kube = await Kube.connect(KubeSettings(server=api.url))
    try:
        scheduler = Scheduler(config, host=mock_host(), kube=kube, freeze_gc=False)
        assert scheduler.web is not None
        nodes = [gpu_node(f"node-{i}") for i in range(3)]
        scheduler._replace_quotas([])
        assert scheduler.web.fleet._digests == {}
        # The node and pod informers finish in either order; the second completes the sync.
        if pods_first:
            scheduler._replace_pods([])
            assert scheduler.web.fleet._digests == {}
            scheduler._replace_nodes(nodes)
        else:
            scheduler._replace_nodes(nodes)
            assert scheduler.web.fleet._digests == {}
            scheduler._replace_pods([])
        assert set(scheduler.web.fleet._digests) == {"node-0", "node-1", "node-2"}
    finally:
        await kube.close()


async def test_a_namespaces_task_list_shows_each_pods_devices_as_the_ledger(
    api, scheduler_factory, http
):
    sched = await _fleet_nodes(api, scheduler_factory)
    await _bind(api, sched, http, "a", "node-0", gpu="2", mem="30000", cores="40")
    other = create_pod(api, gpu_pod("b", namespace="ml", gpu="1", mem="8000", cores="25"))
    assert (await sched.post(http, "bind", bind_args(other, "small-0"))) == {"Error": ""}
    await sched.settle(api)
    status, x = await _get(http, f"{web_url(sched)}/api/v1/namespaces/default/pods")
    assert status == 200
    assert x["pods_total"] == 1 and x["devices"] == 2
    [task] = x["pods"]
    assert (task["pod"], task["node"]) == ("a", "node-0")
    held = {
        (s.device_id, s.memory_mib, s.compute_percent)
        for c in sched.scheduler.ledger.entry(
            next(r.key for r in sched.scheduler.cluster.pods.values() if r.ref.name == "a")
        ).assignment.containers
        for s in c.devices
    }
    assert {(d["device_id"], d["memory_mib"], d["compute_percent"]) for d in task["devices"]} == (
        held
    )
    assert {d["model"] for d in task["devices"]} == {"A100-80GB"}
    assert x["memory_mib"] == 60000 and x["compute_percent"] == 80
    _, ml = await _get(http, f"{web_url(sched)}/api/v1/namespaces/ml/pods")
    assert [t["pod"] for t in ml["pods"]] == ["b"] and ml["devices"] == 1
    _, none = await _get(http, f"{web_url(sched)}/api/v1/namespaces/nobody/pods")
    assert none["pods"] == [] and none["pods_total"] == 0

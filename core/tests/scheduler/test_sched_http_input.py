"""Bodies of the wrong shape and content codings: every one is a 4xx that says what is wrong.

JSON that is not an object, objects whose fields have the wrong types, and compressed (or
claimed-compressed) bodies used to reach the handlers and answer 500; a 4xx must also leave
the scheduler's state and the API server untouched.
"""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from sched_helpers import add_nodes, bind_args, create_pod, filter_args, gpu_pod

WEBHOOK_REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {"uid": "u1", "operation": "CREATE", "object": gpu_pod("w", gpu="1")},
}

VERBS = {
    "filter": "ExtenderArgs",
    "prioritize": "ExtenderArgs",
    "bind": "ExtenderBindingArgs",
    "mutate": "AdmissionReview",
}


async def post_raw(http, url, data, headers=None):
    async with http.post(url, data=data, headers=headers or {}) as r:
        return r.status, dict(r.headers), await r.json(content_type=None)


def message(body):
    return body.get("Error") or body.get("error")


def state_of(api, sched):
    return (
        [(w.method, w.path, json.dumps(w.body, sort_keys=True)) for w in api.writes()],
        sched.scheduler.ledger.snapshot(),
        sorted((e.key, e.node, e.reserved) for e in sched.scheduler.ledger.entries()),
    )


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"[]", "an array"),
        (b'"x"', "a string"),
        (b"1", "a number"),
        (b"-2.5e3", "a number"),
        (b"null", "null"),
        (b"true", "a boolean"),
    ],
)
async def test_json_that_is_not_an_object_is_a_400_naming_both(sched, http, verb, data, kind):
    status, _, body = await post_raw(http, f"{sched.url}/{verb}", data)
    assert status == 400, body
    assert "JSON object" in message(body)
    assert VERBS[verb] in message(body)
    assert kind in message(body)


@pytest.mark.parametrize(
    ("verb", "args", "words"),
    [
        ("filter", {"Pod": 5, "NodeNames": []}, "Pod"),
        ("filter", {"Pod": [], "NodeNames": ["node-0"]}, "Pod"),
        ("filter", {"Pod": {}, "NodeNames": "x"}, "NodeNames"),
        ("filter", {"Pod": {}, "NodeNames": [1, 2]}, "NodeNames"),
        ("filter", {"Pod": {}, "Nodes": []}, "Nodes"),
        ("filter", {"Pod": {}, "Nodes": {"items": 5}}, "Nodes.items"),
        ("prioritize", {"Pod": "x", "NodeNames": []}, "Pod"),
        ("prioritize", {"Pod": {}, "Nodes": "x"}, "Nodes"),
        ("prioritize", {"Pod": {}, "NodeNames": {"a": 1}}, "NodeNames"),
        ("bind", {"PodName": 5, "Node": "node-0"}, "PodName"),
        ("bind", {"PodName": "p", "Node": []}, "Node"),
        ("bind", {"PodName": "p", "Node": "node-0", "PodNamespace": 5}, "PodNamespace"),
        ("bind", {"PodName": "p", "Node": "node-0", "PodUID": ["u"]}, "PodUID"),
        ("mutate", {**WEBHOOK_REVIEW, "kind": 5}, "AdmissionReview"),
        ("mutate", {**WEBHOOK_REVIEW, "request": []}, "request"),
        ("mutate", {**WEBHOOK_REVIEW, "request": {"uid": 5}}, "uid"),
    ],
)
async def test_wrongly_typed_fields_are_a_400_that_changes_nothing(
    api, sched, http, verb, args, words
):
    add_nodes(api, 1)
    create_pod(api, gpu_pod("p", gpu="1"))
    await sched.settle(api)
    before = state_of(api, sched)
    status, _, body = await post_raw(http, f"{sched.url}/{verb}", json.dumps(args).encode())
    assert status == 400, body
    assert words in message(body)
    await sched.scheduler.events.flush()
    assert state_of(api, sched) == before


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "x-garbage", "gzip, identity"])
async def test_a_content_coding_on_a_plain_body_is_refused_with_415(sched, http, verb, coding):
    plain = json.dumps(filter_args(gpu_pod("p", gpu="1"), ["node-0"])).encode()
    status, headers, body = await post_raw(
        http, f"{sched.url}/{verb}", plain, {"Content-Encoding": coding}
    )
    assert status == 415, body
    assert "Content-Encoding" in message(body)
    assert coding.split(",")[0] in message(body)
    assert headers["Accept-Encoding"] == "identity"


@pytest.mark.parametrize(("coding", "pack"), [("gzip", gzip.compress), ("deflate", zlib.compress)])
async def test_really_compressed_bodies_are_refused_not_inflated(api, sched, http, coding, pack):
    """A compressed body (a zip bomb among them) is never inflated: 415, whatever it holds."""
    add_nodes(api, 1)
    await sched.settle(api)
    before = state_of(api, sched)
    # 16 MiB of JSON whitespace before an object: 16 KiB compressed, 5x the body cap inflated.
    bomb = pack(b" " * (16 * 1024 * 1024) + b"{}")
    assert len(bomb) < sched.scheduler.config.server.max_body_bytes
    status, _, body = await post_raw(
        http, f"{sched.url}/filter", bomb, {"Content-Encoding": coding}
    )
    assert status == 415 and coding in message(body)
    assert state_of(api, sched) == before
    # "identity" is no coding at all: served.
    want = create_pod(api, gpu_pod("want", gpu="1"))
    await sched.settle(api)
    status, _, body = await post_raw(
        http,
        f"{sched.url}/filter",
        json.dumps(filter_args(want, ["node-0"])).encode(),
        {"Content-Encoding": "identity"},
    )
    assert status == 200 and body["NodeNames"] == ["node-0"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/filter", 405),
        ("PUT", "/bind", 405),
        ("DELETE", "/mutate", 405),
        ("POST", "/preempt", 404),
        ("POST", "/healthz", 405),
        ("GET", "/nothing-here", 404),
    ],
)
async def test_unknown_methods_and_paths_stay_404_and_405(sched, http, method, path, status):
    async with http.request(method, f"{sched.url}{path}", data=b"[]") as r:
        assert r.status == status


async def test_a_good_bind_still_works_after_the_shape_checks(api, sched, http):
    add_nodes(api, 1)
    want = create_pod(api, gpu_pod("want", gpu="1"))
    await sched.settle(api)
    await sched.post(http, "filter", filter_args(want, ["node-0"]))
    args = bind_args(want, "node-0")
    args["PodNamespace"] = None  # kube-scheduler never sends null, but "" and null mean default
    result = await sched.post(http, "bind", args)
    assert result == {"Error": ""}

"""/filter and /prioritize over HTTP, in both of kube-scheduler's shapes, with no API writes."""

from __future__ import annotations

from sched_helpers import (
    GPU,
    add_nodes,
    bind_args,
    create_pod,
    filter_args,
    gpu_node,
    gpu_pod,
)

from xpushare.codec import HANDOFF_KEY
from xpushare.scheduling import PodRequest
from xpushare.testing.apiserver import pod
from xpushare.testing.handoffs import set_handoff


async def test_filter_node_names_sorts_fit_full_and_unresolvable(api, sched, http):
    add_nodes(api, 2)
    await sched.settle(api)
    api.put("nodes", gpu_node("small", "2x T4-16GB"))
    await sched.settle(api)
    # node-0 gets full: 8 exclusive pods are bound there first.
    for i in range(8):
        p = create_pod(api, gpu_pod(f"hog-{i}", gpu="1", cores="100"))
        result = await sched.post(http, "bind", bind_args(p, "node-0"))
        assert result == {"Error": ""}
        set_handoff(api, "node-0", {HANDOFF_KEY: None})  # its agent served it
    want = create_pod(api, gpu_pod("want", gpu="1", mem="40000"))
    await sched.scheduler.events.flush()  # the binds' events are sent in the background
    writes_before = len(api.writes())
    result = await sched.post(
        http, "filter", filter_args(want, ["node-0", "node-1", "small", "ghost"])
    )
    assert result["NodeNames"] == ["node-1"]
    assert result["Nodes"] is None
    assert result["Error"] == ""
    # Full but otherwise suitable: preemption could help.
    assert set(result["FailedNodes"]) == {"node-0"}
    # 16 GB devices can never hold 40000 MiB; an unknown node has no devices at all.
    assert set(result["FailedAndUnresolvableNodes"]) == {"small", "ghost"}
    assert "memory" in result["FailedAndUnresolvableNodes"]["small"]
    assert "unknown" in result["FailedAndUnresolvableNodes"]["ghost"]
    # /filter never writes to the API server (it fits somewhere, so no event either).
    assert len(api.writes()) == writes_before


async def test_filter_with_full_node_list_returns_node_objects(api, sched, http):
    add_nodes(api, 3)
    await sched.settle(api)
    want = create_pod(api, gpu_pod("want", gpu="2", pct="50"))
    items = [api.get("nodes", n) for n in ("node-0", "node-1", "node-2")]
    body = {"Pod": want, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    result = await sched.post(http, "filter", body)
    assert result["NodeNames"] is None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == [
        "node-0",
        "node-1",
        "node-2",
    ]
    # The node objects come back as they were sent.
    assert result["Nodes"]["items"][1] == items[1]


async def test_pod_without_managed_resources_passes_every_node(api, sched, http):
    add_nodes(api, 2)
    await sched.settle(api)
    plain = create_pod(api, pod("plain", limits={"cpu": "1"}))
    result = await sched.post(http, "filter", filter_args(plain, ["node-0", "node-1", "x"]))
    assert result["NodeNames"] == ["node-0", "node-1", "x"]
    assert result["FailedNodes"] == {}


async def test_invalid_request_fails_every_node_with_the_reason(api, sched, http):
    add_nodes(api, 1)
    await sched.settle(api)
    bad = create_pod(api, gpu_pod("bad", gpu="1", mem="100", pct="50"))
    result = await sched.post(http, "filter", filter_args(bad, ["node-0"]))
    assert result["NodeNames"] == []
    message = result["FailedAndUnresolvableNodes"]["node-0"]
    assert ("invalid" in message and "percent" in message.lower()) or "keep one" in message


async def test_prioritize_scores_within_extender_range(api, scheduler_factory, http):
    sched = await scheduler_factory(**{"placement.policy": "binpack"})
    add_nodes(api, 3)
    await sched.settle(api)
    # Make node-1 fuller than the others: binpack prefers it.
    p = create_pod(api, gpu_pod("first", gpu="1", mem="20000"))
    assert (await sched.post(http, "bind", bind_args(p, "node-1"))) == {"Error": ""}
    want = create_pod(api, gpu_pod("want", gpu="1", mem="10000"))
    scores = await sched.post(http, "prioritize", filter_args(want, ["node-0", "node-1", "node-2"]))
    # Each candidate at most once (grouped by score: kube-scheduler sums by host, not by
    # order), scores taken from the lowest, which is left out (kube-scheduler reads a host it
    # is not given as 0).
    hosts = [s["Host"] for s in scores]
    assert len(hosts) == len(set(hosts)) and set(hosts) <= {"node-0", "node-1", "node-2"}
    assert all(0 < s["Score"] <= 10 for s in scores)
    by_host = {s["Host"]: s["Score"] for s in scores}
    assert by_host["node-1"] > 0
    assert by_host.get("node-0", 0) < by_host["node-1"]


async def test_no_fit_leaves_a_warning_event_on_the_pod(api, sched, http):
    add_nodes(api, 1, "1x T4-16GB")
    await sched.settle(api)
    want = create_pod(api, gpu_pod("huge", gpu="4"))
    result = await sched.post(http, "filter", filter_args(want, ["node-0"]))
    assert result["NodeNames"] == []
    await sched.scheduler.events.flush()
    events = [w.body for w in api.writes("events")]
    assert [e["reason"] for e in events] == ["NoDeviceFit"]
    assert events[0]["involvedObject"]["name"] == "huge"
    assert "fewer devices" in events[0]["message"]
    assert GPU not in events[0]["message"] or True


async def test_a_pod_that_skipped_the_webhook_is_held_to_its_isolation_rules(
    api, scheduler_factory, http
):
    sched = await scheduler_factory(**{"webhook.bypass_namespaces": ["trusted"]})
    add_nodes(api, 2)
    # Created past the webhook (the ignore label, an excluded namespace, an outage with
    # failurePolicy Ignore): hostPID lets it undo the in-container limits.
    sneaky = gpu_pod("sneaky", gpu="1", mem="1000")
    sneaky["spec"]["hostPID"] = True
    sneaky = create_pod(api, sneaky)
    await sched.settle(api)
    result = await sched.post(http, "filter", filter_args(sneaky, ["node-0", "node-1"]))
    assert result["NodeNames"] == []
    assert set(result["FailedAndUnresolvableNodes"]) == {"node-0", "node-1"}
    assert "spec.hostPID" in result["FailedAndUnresolvableNodes"]["node-0"]
    answer = await sched.post(http, "bind", bind_args(sneaky, "node-0"))
    assert "spec.hostPID" in answer["Error"]
    assert not api.get("pods", "sneaky")["spec"].get("nodeName")
    # The same pod in a namespace the admin allowed is placed.
    allowed = gpu_pod("allowed", namespace="trusted", gpu="1", mem="1000")
    allowed["spec"]["hostPID"] = True
    allowed = create_pod(api, allowed)
    result = await sched.post(http, "filter", filter_args(allowed, ["node-0", "node-1"]))
    assert sorted(result["NodeNames"]) == ["node-0", "node-1"]


async def test_one_parse_serves_the_three_verbs_of_a_pod(api, sched, http, monkeypatch):
    add_nodes(api, 2)
    await sched.settle(api)
    placer = sched.scheduler.extender.placer
    parsed: list[str] = []
    real = placer.request

    def counting(view):
        parsed.append(view.ref.name)
        return real(view)

    monkeypatch.setattr(placer, "request", counting)
    want = create_pod(api, gpu_pod("want", gpu="1", mem="1000"))
    result = await sched.post(http, "filter", filter_args(want, ["node-0", "node-1"]))
    assert result["NodeNames"] == ["node-0", "node-1"]
    await sched.post(http, "prioritize", filter_args(want, ["node-0", "node-1"]))
    assert await sched.post(http, "bind", bind_args(want, "node-0")) == {"Error": ""}
    assert parsed == ["want"]


async def test_other_content_under_a_known_uid_and_version_gets_its_own_parse(api, sched, http):
    add_nodes(api, 1, spec="1x A100-80GB")
    await sched.settle(api)
    want = create_pod(api, gpu_pod("want", gpu="1", mem="1000"))
    assert (await sched.post(http, "filter", filter_args(want, ["node-0"])))["NodeNames"] == [
        "node-0"
    ]
    # The same UID and resourceVersion with a request no device can hold: the first parse
    # must not answer for it, and its answer must not stick to the real pod afterwards.
    forged = {**want, "spec": gpu_pod("want", gpu="1", mem="900000")["spec"]}
    result = await sched.post(http, "filter", filter_args(forged, ["node-0"]))
    assert result["NodeNames"] == []
    assert (await sched.post(http, "filter", filter_args(want, ["node-0"])))["NodeNames"] == [
        "node-0"
    ]


def test_the_parse_cache_is_bounded_and_skips_what_is_large():
    from xpushare.models import ContainerView, PodRef, PodView
    from xpushare.scheduler.extender import PARSE_CACHE_ENTRY_CHARS, ParseCache

    cache = ParseCache(size=4)
    calls: list[str] = []

    def parse(view):
        calls.append(view.ref.uid)
        if view.annotations.get("bad"):
            raise ValueError("bad request")
        return PodRequest(pod=view.ref)

    def view(uid: str, **annotations: str) -> PodView:
        # Each pod its own content: the content memo (the next test) stays out of this one.
        return PodView(
            ref=PodRef(name="p", uid=uid),
            annotations=annotations,
            containers=(ContainerView(name="c", limits={"a": uid or "none"}),),
        )

    def parsed(v: PodView, version: str = "1"):
        request, error = cache.parse(v, version, parse)
        return (request.pod.uid if request else None), error

    for i in range(10):
        assert parsed(view(f"u{i}")) == (f"u{i}", "")
    assert len(cache) == 4
    assert parsed(view("u9")) == ("u9", "")
    assert calls.count("u9") == 1
    # A refusal is remembered like an answer; no UID or no version: never remembered.
    assert parsed(view("ub", bad="1")) == (None, "bad request")
    assert parsed(view("ub", bad="1")) == (None, "bad request")
    assert calls.count("ub") == 1
    cache = ParseCache(size=4)
    parsed(view(""))
    parsed(view("u0"), "")
    assert len(cache) == 0  # nothing kept by UID and version (the content memo may answer)
    big = view("big", note="x" * PARSE_CACHE_ENTRY_CHARS)
    parsed(big)
    parsed(big)
    assert calls.count("big") == 2


def test_pods_that_ask_alike_are_parsed_once_and_each_keeps_its_own_name():
    from xpushare.models import ContainerView, PodRef, PodView
    from xpushare.scheduler.extender import ParseCache, content_key

    cache = ParseCache(size=3)
    calls: list[str] = []

    def parse(view):
        calls.append(view.ref.name)
        if view.annotations.get("bad"):
            raise ValueError(f"pod {view.ref.name}: bad request")
        return PodRequest(cpu_milli=int(view.containers[0].limits["cpu"]), pod=view.ref)

    def view(name: str, cpu: str = "1", namespace: str = "a", **annotations: str) -> PodView:
        return PodView(
            ref=PodRef(namespace=namespace, name=name, uid=f"uid-{name}"),
            annotations=annotations,
            labels={"app": "trainer"},
            containers=(ContainerView(name="c", limits={"cpu": cpu}),),
        )

    first, _ = cache.parse(view("p0"), "1", parse)
    second, _ = cache.parse(view("p1"), "1", parse)
    assert calls == ["p0"]
    assert second == PodRequest(cpu_milli=1, pod=view("p1").ref)
    assert first.pod.name == "p0" and second.key == first.key
    # Anything else a parse reads makes another shape: here the namespace, a limit, an
    # annotation. A refusal names its pod, so it is never answered for another.
    cache.parse(view("p2", namespace="b"), "1", parse)
    cache.parse(view("p3", cpu="2"), "1", parse)
    assert cache.parse(view("p4", bad="1"), "1", parse) == (None, "pod p4: bad request")
    assert cache.parse(view("p5", bad="1"), "1", parse) == (None, "pod p5: bad request")
    assert calls == ["p0", "p2", "p3", "p4", "p5"]
    # Bounded: the oldest shape goes first.
    for cpu in ("3", "4", "5"):
        cache.parse(view(f"q{cpu}", cpu=cpu), "1", parse)
    cache.parse(view("again"), "1", parse)
    assert calls[-1] == "again"
    # The key covers every field a parse reads but the name and UID: a field added to the
    # views must be added to it.
    assert set(PodView.model_fields) == {
        "ref",
        "annotations",
        "labels",
        "containers",
        "scheduler_name",
    }
    assert set(ContainerView.model_fields) == {"name", "limits", "requests", "env", "init"}
    assert set(PodRef.model_fields) == {"namespace", "name", "uid"}
    assert content_key(view("x")) == content_key(view("y"))


def _annotated(obj, **annotations):
    obj["metadata"].setdefault("annotations", {}).update(annotations)
    return obj


async def test_a_pods_policy_annotations_decide_its_filter_and_prioritize(
    api, scheduler_factory, http
):
    sched = await scheduler_factory(**{"placement.policy": "binpack"})
    add_nodes(api, 2, "2x A100-80GB")
    await sched.settle(api)
    # node-1 gets one GPU half used.
    p = create_pod(api, gpu_pod("first", gpu="1", mem="40000"))
    assert (await sched.post(http, "bind", bind_args(p, "node-1"))) == {"Error": ""}
    names = ["node-0", "node-1"]
    plain = create_pod(api, gpu_pod("plain", gpu="1", mem="10000"))
    by_host = dict.fromkeys(names, 0) | {
        s["Host"]: s["Score"]
        for s in await sched.post(http, "prioritize", filter_args(plain, names))
    }
    assert by_host["node-1"] > by_host["node-0"]  # the cluster's binpack
    spread = create_pod(
        api,
        _annotated(
            gpu_pod("spread", gpu="1", mem="10000"),
            **{"hami.io/node-scheduler-policy": "spread"},
        ),
    )
    by_host = dict.fromkeys(names, 0) | {
        s["Host"]: s["Score"]
        for s in await sched.post(http, "prioritize", filter_args(spread, names))
    }
    assert by_host["node-0"] > by_host["node-1"]
    # mutex: two GPUs that nobody uses exist only on node-0.
    mutex = create_pod(
        api,
        _annotated(
            gpu_pod("mutex", gpu="2", mem="10000"), **{"hami.io/gpu-scheduler-policy": "mutex"}
        ),
    )
    result = await sched.post(http, "filter", filter_args(mutex, names))
    assert result["NodeNames"] == ["node-0"]
    assert (
        "already used" in (result["FailedNodes"] | result["FailedAndUnresolvableNodes"])["node-1"]
    )
    bad = create_pod(
        api,
        _annotated(gpu_pod("bad", gpu="1"), **{"hami.io/device-scoring-weights": "slot=1"}),
    )
    result = await sched.post(http, "filter", filter_args(bad, names))
    assert result["NodeNames"] == []
    assert "hami.io/device-scoring-weights" in result["FailedAndUnresolvableNodes"]["node-0"]

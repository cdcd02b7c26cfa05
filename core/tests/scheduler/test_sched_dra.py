"""DRA mode's placement: allocated ResourceClaims booked into the ledger, DRA pods ranked by them.

Everything real but the API server: the scheduler lists and watches ResourceClaims and
ResourceSlices through the official client from the fake API server, claims are allocated the
way kube-scheduler writes them (status.allocation.devices.results with consumedCapacity and a
node selector), slices are the node agent's own (node/dra/slices.py), and the verbs are asked
over HTTP with kube-scheduler's JSON.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import aiohttp
from sched_helpers import Running, bind_args, filter_args, gpu_node, gpu_pod, start_scheduler

from xpushare.codec import AGENT_MODE_KEY, ASSIGNMENT_KEY, HANDOFF_KEY
from xpushare.node.dra.slices import build_slices, device_entry
from xpushare.plugins.builtin import mock
from xpushare.scheduler.drabook import CLAIM_KEY_PREFIX
from xpushare.testing.apiserver import FakeApiServer, pod

DRIVER = "mock.xpushare.io"
DRA = {"dra.enabled": True}


def put_node(api: FakeApiServer, name: str, spec: str = "2x A100-80GB") -> None:
    """A node with the agent's inventory annotation and its ResourceSlice, as in DRA mode."""
    obj = api.put("nodes", gpu_node(name, spec))
    devices = [device_entry(d, None, None) for d in mock.parse_spec(spec, name)]
    for item in build_slices(
        node=name,
        node_uid=obj["metadata"]["uid"],
        vendor="mock",
        devices=devices,
        generation=1,
    ):
        api.put("resourceslices", item)


def claim(
    name: str,
    *,
    memory: str | None = "8Gi",
    cores: str | None = "30",
    count: int = 1,
    namespace: str = "default",
) -> dict[str, Any]:
    capacity: dict[str, str] = {}
    if memory is not None:
        capacity["memory"] = memory
    if cores is not None:
        capacity["cores"] = cores
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "allocationMode": "ExactCount"}
    exactly["count"] = count
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def allocate(
    obj: dict[str, Any],
    node: str,
    devices: list[str],
    *,
    consumed: dict[str, str] | None = None,
    driver: str = DRIVER,
) -> None:
    """Write status.allocation as kube-scheduler's DRA plugin does."""
    results = []
    for device in devices:
        result: dict[str, Any] = {
            "request": "gpu",
            "driver": driver,
            "pool": node,
            "device": device,
            "shareID": str(uuid.uuid4()),
        }
        if consumed is not None:
            result["consumedCapacity"] = {**consumed, "shares": "1"}
        results.append(result)
    obj["status"] = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }


def allocated(name: str, node: str, devices: list[str], memory: str, cores: str) -> dict[str, Any]:
    obj = claim(name, memory=memory, cores=cores)
    allocate(obj, node, devices, consumed={"memory": memory, "cores": cores})
    return obj


def dra_pod(name: str, claim_name: str, namespace: str = "default") -> dict[str, Any]:
    obj = pod(name, namespace=namespace)
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return obj


def usage(running: Running, node: str, device: str) -> tuple[int, int, int]:
    found = running.scheduler.ledger.device_usage(node, "mock")[device]
    return found.used_slots, found.used_memory_mib, found.used_compute_percent


def claim_entries(running: Running) -> list[str]:
    return sorted(
        e.key for e in running.scheduler.ledger.entries() if e.key.startswith(CLAIM_KEY_PREFIX)
    )


async def start(api: FakeApiServer, **overrides: Any) -> Running:
    return await start_scheduler(api, **DRA, **overrides)


async def test_two_claims_on_one_device_book_their_consumed_capacity_exactly(api):
    put_node(api, "n1")
    api.put("resourceclaims", allocated("a", "n1", ["mock-n1-0"], "8Gi", "30"))
    api.put("resourceclaims", allocated("b", "n1", ["mock-n1-0"], "16Gi", "20"))
    running = await start(api)
    try:
        assert usage(running, "n1", "MOCK-n1-0") == (2, 8192 + 16384, 50)
        assert usage(running, "n1", "MOCK-n1-1") == (0, 0, 0)
        # Bytes that are not whole MiB are rounded up, as kube-scheduler rounds requests.
        api.put("resourceclaims", allocated("c", "n1", ["mock-n1-1"], "1000000", "0"))
        await running.settle(api)
        assert usage(running, "n1", "MOCK-n1-1") == (1, 1, 0)
    finally:
        await running.close()


async def test_a_claim_without_consumed_capacity_books_its_devices_whole(api):
    put_node(api, "n1")
    whole = claim("whole", memory=None, cores=None, count=2)
    allocate(whole, "n1", ["mock-n1-0", "mock-n1-1"])  # no consumedCapacity at all
    api.put("resourceclaims", whole)
    running = await start(api)
    try:
        for device in ("MOCK-n1-0", "MOCK-n1-1"):
            assert usage(running, "n1", device) == (1, 81920, 100)
            table = running.scheduler.ledger.node("n1").tables["mock"]
            state = next(d for d in table.devices if d.id == device)
            assert state.exclusive == 1
    finally:
        await running.close()


async def test_a_claim_shared_by_two_pods_is_counted_once(api):
    put_node(api, "n1")
    shared = allocated("shared", "n1", ["mock-n1-0"], "8Gi", "30")
    shared["status"]["reservedFor"] = [
        {"resource": "pods", "name": "p1", "uid": "u1"},
        {"resource": "pods", "name": "p2", "uid": "u2"},
    ]
    api.put("resourceclaims", shared)
    for name in ("p1", "p2"):
        obj = dra_pod(name, "shared")
        obj["spec"]["nodeName"] = "n1"
        obj["status"] = {"phase": "Running"}
        api.put("pods", obj)
    running = await start(api)
    try:
        assert usage(running, "n1", "MOCK-n1-0") == (1, 8192, 30)
        assert len(claim_entries(running)) == 1
        # A relist of the pods (which never count claims) leaves the claim's booking alone.
        running.scheduler.cluster.replace_pods(api.items("pods"))
        assert usage(running, "n1", "MOCK-n1-0") == (1, 8192, 30)
    finally:
        await running.close()


async def test_deallocation_and_deletion_free_the_device(api):
    put_node(api, "n1")
    api.put("resourceclaims", allocated("a", "n1", ["mock-n1-0"], "8Gi", "30"))
    api.put("resourceclaims", allocated("b", "n1", ["mock-n1-0"], "16Gi", "20"))
    running = await start(api)
    try:
        assert usage(running, "n1", "MOCK-n1-0") == (2, 24576, 50)

        def deallocate(obj: dict[str, Any]) -> None:
            obj["status"].pop("allocation")

        api.modify("resourceclaims", "a", deallocate, "default")
        await running.settle(api)
        assert usage(running, "n1", "MOCK-n1-0") == (1, 16384, 20)
        api.delete("resourceclaims", "b", "default")
        await running.settle(api)
        assert usage(running, "n1", "MOCK-n1-0") == (0, 0, 0)
        assert claim_entries(running) == []
    finally:
        await running.close()


async def test_a_restart_rebuilds_the_bookings_from_the_list(api):
    put_node(api, "n1")
    api.put("resourceclaims", allocated("a", "n1", ["mock-n1-0"], "8Gi", "30"))
    api.put("resourceclaims", allocated("b", "n1", ["mock-n1-1"], "4Gi", "10"))
    first = await start(api)
    before = (usage(first, "n1", "MOCK-n1-0"), usage(first, "n1", "MOCK-n1-1"))
    await first.close()
    # While no scheduler runs: one claim is deleted, another allocated.
    api.delete("resourceclaims", "b", "default")
    api.put("resourceclaims", allocated("c", "n1", ["mock-n1-0"], "2Gi", "5"))
    api.compact()
    second = await start(api)
    try:
        assert before == ((1, 8192, 30), (1, 4096, 10))
        assert usage(second, "n1", "MOCK-n1-0") == (2, 8192 + 2048, 35)
        assert usage(second, "n1", "MOCK-n1-1") == (0, 0, 0)
        assert len(claim_entries(second)) == 2
    finally:
        await second.close()


async def test_hostile_claims_are_refused_without_touching_the_ledger(api, caplog):
    put_node(api, "n1")
    api.put("resourceclaims", allocated("good", "n1", ["mock-n1-0"], "8Gi", "30"))
    bad_memory = claim("bad-memory")
    allocate(bad_memory, "n1", ["mock-n1-1"], consumed={"memory": "1e999999", "cores": "1"})
    api.put("resourceclaims", bad_memory)
    bad_cores = claim("bad-cores")
    allocate(bad_cores, "n1", ["mock-n1-1"], consumed={"memory": "1Gi", "cores": "150"})
    api.put("resourceclaims", bad_cores)
    foreign = claim("foreign")
    allocate(foreign, "n1", ["mock-n1-1"], consumed={"memory": "1Gi"}, driver="gpu.example.com")
    api.put("resourceclaims", foreign)
    huge = claim("huge")
    allocate(huge, "n1", ["mock-n1-1"] * 5000, consumed={"memory": "1Mi"})
    api.put("resourceclaims", huge)
    caplog.set_level(logging.WARNING)
    running = await start(api)
    try:
        assert usage(running, "n1", "MOCK-n1-0") == (1, 8192, 30)
        assert usage(running, "n1", "MOCK-n1-1") == (0, 0, 0), "nothing bad or foreign booked"
        text = caplog.text
        for name in ("default/bad-memory", "default/bad-cores", "default/huge"):
            assert f"ResourceClaim {name}" in text, f"no log names {name}"
        assert "outside 0..100" in text and "more than the API allows" in text
        assert "foreign" not in text, "another driver's claim is simply not ours"

        # A booked claim whose status is then garbled keeps its booking.
        def garble(obj: dict[str, Any]) -> None:
            obj["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {
                "memory": "lots"
            }

        api.modify("resourceclaims", "good", garble, "default")
        await running.settle(api)
        assert usage(running, "n1", "MOCK-n1-0") == (1, 8192, 30)
    finally:
        await running.close()


async def test_a_claim_on_a_node_not_known_yet_is_booked_when_its_devices_appear(api):
    early = api.put("resourceclaims", allocated("early", "n9", ["mock-n9-1"], "8Gi", "30"))
    running = await start(api)
    try:
        book = running.scheduler.claims
        assert book is not None and book.pending == {early["metadata"]["uid"]}
        assert running.scheduler.ledger.node("n9") is None
        put_node(api, "n9")
        await running.settle(api)
        assert usage(running, "n9", "MOCK-n9-1") == (1, 8192, 30)
        assert book.pending == set()
    finally:
        await running.close()


async def test_a_slice_maps_device_names_to_the_inventory_ids(api):
    # A device id that is no DNS label gets a hashed name in the slice (node/dra/slices.py):
    # only the slice's uuid attribute says which device the allocation means.
    from xpushare.codec import encode_inventory
    from xpushare.node.dra.slices import device_name
    from xpushare.testing.apiserver import node as node_obj

    devices = [
        d.model_copy(update={"id": f"GPU_{i}:X"})
        for i, d in enumerate(mock.parse_spec("2x A100-80GB", "h"))
    ]
    obj = api.put(
        "nodes",
        node_obj("h", {"xpushare.io/inventory-mock": encode_inventory("mock", "h", devices)}),
    )
    name = device_name("GPU_1:X")
    assert name != "gpu_1:x"
    api.put("resourceclaims", allocated("c", "h", [name], "8Gi", "30"))
    running = await start(api)
    try:
        assert claim_entries(running) == [], "pending: no slice names the device yet"
        for item in build_slices(
            node="h",
            node_uid=obj["metadata"]["uid"],
            vendor="mock",
            devices=[device_entry(d, None, None) for d in devices],
            generation=1,
        ):
            api.put("resourceslices", item)
        await running.settle(api)
        assert usage(running, "h", "GPU_1:X") == (1, 8192, 30)
    finally:
        await running.close()


# -- ranking DRA pods --------------------------------------------------------------------------


async def prioritize(
    running: Running, pod_obj: dict[str, Any], nodes: list[str], verb: str = "prioritize"
) -> dict[str, int]:
    async with aiohttp.ClientSession() as http:
        answer = await running.post(http, verb, filter_args(pod_obj, nodes))
    # A node the answer leaves out scores 0, as kube-scheduler reads it.
    return dict.fromkeys(nodes, 0) | {item["Host"]: item["Score"] for item in answer}


async def test_prioritize_ranks_a_dra_pod_by_the_claims_booked_usage(api):
    for name in ("busy", "idle"):
        put_node(api, name, "1x A100-80GB")
    api.put("resourceclaims", allocated("held", "busy", ["mock-busy-0"], "40Gi", "50"))
    api.put("resourceclaims", claim("want", memory="16Gi", cores="20"))
    api.put("pods", dra_pod("p", "want"))
    scores = {}
    for policy in ("binpack", "spread"):
        running = await start(api, **{"placement.policy": policy})
        try:
            scores[policy] = await prioritize(
                running, api.get("pods", "p", "default"), ["busy", "idle"]
            )
        finally:
            await running.close()
    assert scores["binpack"]["busy"] > scores["binpack"]["idle"]
    assert scores["spread"]["idle"] > scores["spread"]["busy"]


async def test_fgd_keeps_whole_gpus_free_for_a_small_dra_pod(api):
    # Node "shared" has one GPU a claim already uses a part of and one free; node "fresh" has
    # two free GPUs. A small DRA pod goes where it breaks no whole GPU (the default fgd-cpu).
    put_node(api, "shared")
    put_node(api, "fresh")
    api.put("resourceclaims", allocated("held", "shared", ["mock-shared-0"], "32Gi", "40"))
    api.put("resourceclaims", claim("small", memory="16Gi", cores="20"))
    api.put("pods", dra_pod("p", "small"))
    running = await start(api)
    try:
        assert running.scheduler.config.placement.policy == "fgd-cpu"
        p = api.get("pods", "p", "default")
        async with aiohttp.ClientSession() as http:
            filtered = await running.post(http, "filter", filter_args(p, ["shared", "fresh"]))
        assert filtered["NodeNames"] == ["shared", "fresh"]
        scores = await prioritize(running, p, ["shared", "fresh"])
        assert scores["shared"] > scores["fresh"], scores
        # Without the claim's booking the two nodes would be alike: its usage decides.
        api.delete("resourceclaims", "held", "default")
        await running.settle(api)
        again = await prioritize(running, p, ["shared", "fresh"])
        assert again["shared"] == again["fresh"], again
    finally:
        await running.close()


async def test_filter_turns_down_nodes_the_claims_filled(api):
    put_node(api, "full", "1x A100-80GB")
    put_node(api, "room", "1x A100-80GB")
    api.put("resourceclaims", allocated("big", "full", ["mock-full-0"], "70Gi", "10"))
    api.put("resourceclaims", claim("want", memory="16Gi", cores="10"))
    api.put("pods", dra_pod("p", "want"))
    running = await start(api)
    try:
        async with aiohttp.ClientSession() as http:
            answer = await running.post(
                http, "filter", filter_args(api.get("pods", "p", "default"), ["full", "room"])
            )
        assert answer["NodeNames"] == ["room"]
        assert "full" in answer["FailedNodes"]
    finally:
        await running.close()


async def test_the_dra_routes_answer_dra_pods_only(api):
    for name in ("busy", "idle"):
        put_node(api, name, "1x A100-80GB")
    api.put("resourceclaims", allocated("held", "busy", ["mock-busy-0"], "40Gi", "50"))
    api.put("resourceclaims", claim("want", memory="16Gi", cores="20"))
    api.put("pods", dra_pod("p", "want"))
    running = await start(api, **{"placement.policy": "binpack"})
    try:
        dra = await prioritize(
            running, api.get("pods", "p", "default"), ["busy", "idle"], "dra/prioritize"
        )
        assert dra["busy"] > dra["idle"]
        # A device-plugin pod is the managed-resources entry's: the DRA entry adds nothing.
        plain = gpu_pod("plain", gpu="1", mem="1024")
        assert set(
            (await prioritize(running, plain, ["busy", "idle"], "dra/prioritize")).values()
        ) == {0}
        assert max((await prioritize(running, plain, ["busy", "idle"])).values()) > 0
        async with aiohttp.ClientSession() as http:
            passed = await running.post(http, "dra/filter", filter_args(plain, ["busy", "idle"]))
        assert passed["NodeNames"] == ["busy", "idle"] and not passed["FailedNodes"]

        # A claim allocated already (shared with a pod placed before) asks for nothing new.
        def allocate_want(obj: dict[str, Any]) -> None:
            allocate(obj, "idle", ["mock-idle-0"], consumed={"memory": "16Gi", "cores": "20"})

        api.modify("resourceclaims", "want", allocate_want, "default")
        await running.settle(api)
        after = await prioritize(
            running, api.get("pods", "p", "default"), ["busy", "idle"], "dra/prioritize"
        )
        assert set(after.values()) == {0}
    finally:
        await running.close()


async def test_without_dra_enabled_claims_are_not_watched(api):
    put_node(api, "n1")
    api.put("resourceclaims", allocated("a", "n1", ["mock-n1-0"], "8Gi", "30"))
    running = await start_scheduler(api)
    try:
        assert {i.resource for i in running.scheduler.informers} == {
            "nodes",
            "pods",
            "resourcequotas",
            "handoffs",
        }
        assert usage(running, "n1", "MOCK-n1-0") == (0, 0, 0)
    finally:
        await running.close()


async def test_fgd_cpu_and_binpack_rank_a_dra_pod_differently(api):
    # The configured policy ranks DRA pods, over the claims' bookings: binpack fills the node
    # with a GPU in use, fgd-cpu (fragmentation against the workload it learnt at /filter)
    # picks the other. Both answers depend on the claim "held" being booked on "two".
    put_node(api, "two", "2x A100-80GB")
    put_node(api, "one", "1x A100-80GB")
    api.put("resourceclaims", allocated("held", "two", ["mock-two-1"], "16Gi", "20"))
    api.put("resourceclaims", claim("small", memory="16Gi", cores="20"))
    api.put("pods", dra_pod("p", "small"))
    best = {}
    for policy in ("binpack", "fgd-cpu"):
        running = await start(api, **{"placement.policy": policy})
        try:
            p = api.get("pods", "p", "default")
            async with aiohttp.ClientSession() as http:
                await running.post(http, "filter", filter_args(p, ["two", "one"]))
            scores = await prioritize(running, p, ["two", "one"])
            assert scores["two"] != scores["one"], (policy, scores)
            best[policy] = max(scores, key=scores.__getitem__)
        finally:
            await running.close()
    assert best == {"binpack": "two", "fgd-cpu": "one"}


async def test_hostile_pod_claims_and_claim_specs_are_answered_not_crashed(api, caplog):
    put_node(api, "n1", "1x A100-80GB")
    bad_specs = {
        "neg": {"count": 1, "capacity": {"requests": {"memory": "-1Gi"}}},
        "count": {"count": "many"},
        "huge": {"count": 1, "capacity": {"requests": {"memory": "9" * 5000}}},
    }
    for name, exactly in bad_specs.items():
        obj = claim(name)
        obj["spec"]["devices"]["requests"][0]["exactly"].update(exactly)
        api.put("resourceclaims", obj)
    many = claim("many")
    many["spec"]["devices"]["requests"] = many["spec"]["devices"]["requests"] * 40
    api.put("resourceclaims", many)
    caplog.set_level(logging.WARNING)
    running = await start(api)
    try:
        for name in (*bad_specs, "many"):
            assert f"ResourceClaim default/{name}: spec.devices.requests" in caplog.text, name
            p = dra_pod(f"p-{name}", name)
            assert set((await prioritize(running, p, ["n1"], "dra/prioritize")).values()) == {0}
        junk = pod("junk")
        junk["spec"]["resourceClaims"] = [1, "x", {"name": 5}, {"resourceClaimName": "a" * 10_000}]
        junk["spec"]["resourceClaims"] += [{"name": "c", "resourceClaimName": "neg"}] * 10_000
        junk["status"] = {"resourceClaimStatuses": "not a list"}
        for verb in ("filter", "dra/filter"):
            async with aiohttp.ClientSession() as http:
                answer = await running.post(http, verb, filter_args(junk, ["n1"]))
            assert answer["NodeNames"] == ["n1"]
        assert set((await prioritize(running, junk, ["n1"])).values()) == {0}
        assert claim_entries(running) == []
    finally:
        await running.close()


def dra_mode_node(api: FakeApiServer, name: str, spec: str = "1x A100-80GB") -> None:
    """A node whose agent runs in DRA mode and says so (AGENT_MODE_KEY)."""
    api.put("nodes", gpu_node(name, spec, **{AGENT_MODE_KEY: "dra"}))


async def test_a_device_plugin_pod_gets_only_whole_devices_on_a_dra_node(api):
    """A pod written for the device-plugin path reaches a DRA node only through the
    DeviceClass's extendedResourceName: whole devices. A share is refused there with the
    reason, and placed on a device-plugin node."""
    dra_mode_node(api, "dra-node")
    api.put("nodes", gpu_node("dp-node", "1x A100-80GB"))
    running = await start(api)
    try:
        async with aiohttp.ClientSession() as http:
            share = gpu_pod("share", gpu="1", mem="1024")
            answer = await running.post(http, "filter", filter_args(share, ["dra-node", "dp-node"]))
            assert answer["NodeNames"] == ["dp-node"]
            why = answer["FailedAndUnresolvableNodes"]["dra-node"]
            assert AGENT_MODE_KEY in why and "ResourceClaim" in why
            whole = gpu_pod("whole", gpu="1")
            answer = await running.post(http, "filter", filter_args(whole, ["dra-node", "dp-node"]))
            assert answer["NodeNames"] == ["dra-node", "dp-node"]
        # The agent switched back to device-plugin mode: shares fit there again.
        api.modify("nodes", "dra-node", lambda o: o["metadata"]["annotations"].pop(AGENT_MODE_KEY))
        await running.settle(api)
        async with aiohttp.ClientSession() as http:
            answer = await running.post(http, "filter", filter_args(share, ["dra-node", "dp-node"]))
        assert answer["NodeNames"] == ["dra-node", "dp-node"]
    finally:
        await running.close()


async def test_a_bind_on_a_dra_node_books_nothing_and_hands_nothing_off(api):
    """There kube-scheduler's allocator booked the devices in a claim and kubelet prepares it
    through our DRA driver: a handoff no DRA agent releases would block the node, and an
    assignment would count the devices a second time beside the claim."""
    dra_mode_node(api, "dra-node")
    whole = api.put("pods", gpu_pod("whole", gpu="1"))
    share = api.put("pods", gpu_pod("share", gpu="1", mem="1024"))
    running = await start(api)
    try:
        async with aiohttp.ClientSession() as http:
            answer = await running.post(http, "bind", bind_args(whole, "dra-node"))
            assert answer == {"Error": ""}
            refused = await running.post(http, "bind", bind_args(share, "dra-node"))
        assert "ResourceClaim" in refused["Error"] and AGENT_MODE_KEY in refused["Error"]
        bound = api.get("pods", "whole", "default")
        assert bound["spec"]["nodeName"] == "dra-node"
        assert ASSIGNMENT_KEY not in (bound["metadata"].get("annotations") or {})
        assert HANDOFF_KEY not in (api.get("nodes", "dra-node")["metadata"]["annotations"])
        assert not api.get("pods", "share", "default")["spec"].get("nodeName")
        await running.settle(api)
        assert running.scheduler.ledger.entry(bound["metadata"]["uid"]) is None
        assert usage(running, "dra-node", "MOCK-dra-node-0") == (0, 0, 0)
    finally:
        await running.close()

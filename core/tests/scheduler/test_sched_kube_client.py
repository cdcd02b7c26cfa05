"""The scheduler's API calls below the generated methods: credentials, paths and errors.

``Kube`` sends its object calls through ``ApiClient.param_serialize`` and ``call_api`` (not
the generated ``CoreV1Api`` methods, whose argument validation costs a third of a bind's
client time). These tests pin what that must not lose: the bearer token on every call and
its refresh, escaped path segments, and the API server's errors mapped to ours.
"""

from __future__ import annotations

import pytest
from kubernetes.aio import client

from xpushare.scheduler.kube import Conflict, Kube, NotFound
from xpushare.testing.apiserver import node, pod


def _kube(api, token: str) -> tuple[Kube, client.Configuration]:
    configuration = client.Configuration(
        host=api.url,
        api_key={"BearerToken": token},
        api_key_prefix={"BearerToken": "Bearer"},
    )
    return Kube(client.ApiClient(configuration)), configuration


async def test_every_object_call_carries_the_token_and_a_refreshed_one(api):
    api.put("nodes", node("n1", {}))
    api.put("pods", pod("p1"))
    kube, configuration = _kube(api, "first")
    try:
        created = await kube.create_handoff_lease("n1", {"a": "1"}, owner_uid="uid-n1")
        patched = await kube.patch_handoff_lease(
            "n1", {"a": "2"}, resource_version=created["metadata"]["resourceVersion"]
        )
        assert patched["metadata"]["annotations"]["a"] == "2"
        assert (await kube.get_handoff_lease("n1"))["spec"]["holderIdentity"] == "n1"
        await kube.get_pod("default", "p1")
        await kube.patch_pod_annotations("default", "p1", {"b": "2"})
        await kube.create_event("default", {"metadata": {"name": "e1"}, "reason": "Test"})
        lease = await kube.create_lease(
            "kube-system", {"metadata": {"name": "l1"}, "spec": {"holderIdentity": "x"}}
        )
        await kube.get_lease("kube-system", "l1")
        await kube.replace_lease("kube-system", "l1", lease)
        # The in-cluster loader refreshes the projected token through this hook: the next
        # call must carry what the hook put in place.
        configuration.refresh_api_key_hook = lambda c: c.api_key.update(BearerToken="second")
        await kube.bind("default", "p1", "", "n1", {})
    finally:
        await kube.close()
    sent = [(r.method, r.authorization) for r in api.requests]
    assert len(sent) == 10
    assert sent[:-1] == [(m, "Bearer first") for m, _ in sent[:-1]]
    assert sent[-1] == ("POST", "Bearer second")
    assert api.get("pods", "p1")["spec"]["nodeName"] == "n1"


async def test_names_are_one_path_segment_each(api):
    api.put("pods", pod("p1"))
    kube, _ = _kube(api, "t")
    try:
        # Unescaped, "default/pods/p1" would name the pod in namespace "default".
        with pytest.raises(NotFound):
            await kube.get_pod("default/pods/p1#", "p1")
        with pytest.raises(NotFound):
            await kube.get_handoff_lease("../../../../api/v1/namespaces/default/pods/p1")
    finally:
        await kube.close()


async def test_a_stale_resource_version_is_a_conflict_and_names_the_call(api):
    kube, _ = _kube(api, "t")
    try:
        found = await kube.create_handoff_lease("n1", {"a": "0"})
        version = found["metadata"]["resourceVersion"]
        await kube.patch_handoff_lease("n1", {"a": "1"}, resource_version=version)
        with pytest.raises(Conflict) as err:
            await kube.patch_handoff_lease("n1", {"a": "2"}, resource_version=version)
        with pytest.raises(Conflict):
            await kube.create_handoff_lease("n1", {"a": "3"})  # it exists: 409 as well
        with pytest.raises(NotFound):
            await kube.patch_handoff_lease("n2", {"a": "1"}, resource_version=version)
    finally:
        await kube.close()
    assert "handoff Lease kube-system/handoff.n1 of node n1" in str(err.value)
    lease = api.get("leases", "handoff.n1", "kube-system")
    assert lease["metadata"]["annotations"]["a"] == "1"
    assert lease["metadata"]["labels"] == {"xpushare.io/role": "handoff"}


async def test_a_nodes_pods_are_read_on_our_connections_with_the_token(api):
    # The first bind of a leader's term on a node reads the node's pods (handoff.py): on the
    # bind path, so on our own connections (apiwrite.py), with the same token and selector.
    for name, node_name in (("on", "gpu-1"), ("elsewhere", "gpu-2"), ("pending", None)):
        obj = pod(name)
        if node_name:
            obj["spec"]["nodeName"] = node_name
        api.put("pods", obj)
    kube, _ = _kube(api, "t")
    try:
        found = await kube.list_node_pods("gpu-1")
    finally:
        await kube.close()
    assert [p["metadata"]["name"] for p in found] == ["on"]
    (sent,) = [r for r in api.requests if r.method == "GET"]
    assert sent.authorization == "Bearer t"
    assert sent.query.get("fieldSelector") == "spec.nodeName=gpu-1"

"""The agent's Kubernetes client over HTTP against a local fake API server (kmock)."""

import time

from kmock import resource
from nodekit import NODE, RESOURCE, one_slice, running

from xpushare.codec import (
    ASSIGNMENT_KEY,
    HANDOFF_KEY,
    Handoff,
    decode_inventory,
    encode_assignment,
    encode_handoff,
    handoff_lease_name,
)
from xpushare.models import PodRef
from xpushare.node import KubeClient
from xpushare.testing.kubelet import ContainerSpec

NODES = resource("", "v1", "nodes")
PODS = resource("", "v1", "pods")
LEASES = resource("coordination.k8s.io", "v1", "leases")
HANDOFF_NAMESPACE = "gpu-system"


def add_node(kmock, annotations=None):
    kmock.objects[NODES, None, NODE] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "annotations": dict(annotations or {}), "labels": {}},
    }


def add_pod(kmock, name, node=NODE, phase="Pending", annotations=None):
    kmock.objects[PODS, "default", name] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": dict(annotations or {}),
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


def node_annotations(kmock):
    return dict(kmock.objects[NODES, None, NODE]["metadata"].get("annotations") or {})


def add_handoff_lease(kmock, annotations):
    kmock.objects[LEASES, HANDOFF_NAMESPACE, handoff_lease_name(NODE)] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": handoff_lease_name(NODE),
            "namespace": HANDOFF_NAMESPACE,
            "annotations": dict(annotations),
        },
        "spec": {"holderIdentity": NODE},
    }


def lease_annotations(kmock):
    lease = kmock.objects[LEASES, HANDOFF_NAMESPACE, handoff_lease_name(NODE)]
    return dict(lease["metadata"].get("annotations") or {})


async def test_reads_and_merge_patches_its_node(kmock):
    add_node(kmock, {"keep": "1", "drop": "2"})
    client = KubeClient.for_host(NODE, str(kmock.url))
    try:
        node = await client.get_node()
        assert node["metadata"]["annotations"] == {"keep": "1", "drop": "2"}
        patched = await client.patch_node(
            {"metadata": {"annotations": {"drop": None, "new": "3"}, "labels": {"a": "b"}}}
        )
        assert patched["metadata"]["annotations"] == {"keep": "1", "new": "3"}
        assert kmock["patch"][0].headers["Content-Type"] == "application/merge-patch+json"
    finally:
        client.close()


async def test_reads_pods_and_lists_only_its_nodes_pods(kmock):
    add_node(kmock)
    add_pod(kmock, "mine")
    add_pod(kmock, "theirs", node="node-b")
    client = KubeClient.for_host(NODE, str(kmock.url))
    try:
        assert await client.get_pod("default", "absent") is None
        pod = await client.get_pod("default", "mine")
        assert pod is not None and pod["metadata"]["uid"] == "uid-mine"
        names = [p["metadata"]["name"] for p in await client.list_node_pods()]
        assert names == ["mine"]
        assert kmock["get"][-1].params["fieldSelector"] == f"spec.nodeName={NODE}"
    finally:
        client.close()


async def test_agent_publishes_and_allocates_through_the_real_client(kmock, plugin_dir):
    add_node(kmock)
    client = KubeClient.for_host(NODE, str(kmock.url), handoff_namespace=HANDOFF_NAMESPACE)
    try:
        async with running(plugin_dir, kube=client) as run:
            key = "xpushare.io/inventory-mock"
            await run.kubelet.wait_until(lambda: run.agent.publisher.published > 0)
            inventory = decode_inventory(key, node_annotations(kmock)[key])
            assert inventory.state == "ok" and len(inventory.devices) == 8
            labels = kmock.objects[NODES, None, NODE]["metadata"]["labels"]
            assert labels["xpushare.io/mock.count"] == "8"
            # What the scheduler writes at bind, then kubelet admits the pod.
            pod = PodRef(name="job", uid="uid-job")
            assignment = one_slice(f"MOCK-{NODE}-3", memory=2048, compute=20)
            add_pod(kmock, "job", annotations={ASSIGNMENT_KEY: encode_assignment(assignment)})
            handoff = Handoff.begin(pod, ["mock"], now=time.time(), ttl_s=30)
            add_handoff_lease(kmock, {HANDOFF_KEY: encode_handoff(handoff)})
            result = await run.kubelet.admit_pod(pod.uid, [ContainerSpec("main", {RESOURCE: 1})])
            assert result["main"].envs["XPUSHARE_MOCK_MEMORY_LIMIT_0"] == "2048m"
            # Read from the Lease of its namespace; nothing written back (kubelet's status
            # write frees it for the scheduler's next bind).
            reads = [r for r in kmock["get"] if "/leases/" in str(r.url)]
            assert f"/namespaces/{HANDOFF_NAMESPACE}/leases/handoff.{NODE}" in str(reads[-1].url)
            assert not [r for r in kmock["patch"] if "/leases/" in str(r.url)]
            assert HANDOFF_KEY in lease_annotations(kmock)
    finally:
        client.close()

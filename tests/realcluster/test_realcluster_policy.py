"""The chart's ValidatingAdmissionPolicy for the node agent, evaluated by a real kube-apiserver.

RBAC grants the agent's ServiceAccount "patch nodes" on every node; the policy narrows a
request from it to the Node its pod runs on (the node name the API server puts in a
pod-bound token's extra) and to xpushare.io/ annotations and labels. tests/deploy evaluates
its CEL with a CEL library; here the API server itself compiles it, binds it and answers.
"""

from __future__ import annotations

from typing import Any

import pytest
from chartkit import RELEASE
from kubernetes.client.rest import ApiException
from realkit import SYSTEM_NAMESPACE, Installed, nvidia_node

from xpushare.codec import inventory_key

pytestmark = pytest.mark.realcluster

AGENT_ACCOUNT = f"{RELEASE}-xpushare-node"


def agent_pod(installed: Installed, node: str) -> Any:
    """A node agent's pod already bound to *node* (no kubelet runs it: its token is what
    matters)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"agent-{node}", "namespace": SYSTEM_NAMESPACE},
        "spec": {
            "nodeName": node,
            "serviceAccountName": AGENT_ACCOUNT,
            "containers": [{"name": "agent", "image": "xpushare"}],
        },
    }
    return installed.core.create_namespaced_pod(SYSTEM_NAMESPACE, body)


def refusal(call: Any) -> str:
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status in (403, 422), refused.value
    return str(refused.value.body)


def test_node_agent_may_change_only_xpushare_keys_of_its_own_node(installed: Installed) -> None:
    mine, other = "gpu-agent-1", "gpu-agent-2"
    for name in (mine, other):
        nvidia_node(installed, name, group="agent")
    pod = agent_pod(installed, mine)
    kubeconfig = installed.plane.token_kubeconfig(
        SYSTEM_NAMESPACE, AGENT_ACCOUNT, pod=(pod.metadata.name, pod.metadata.uid)
    )
    agent = installed.plane.core(kubeconfig)
    key = inventory_key("nvidia")

    # Its own node's xpushare.io/ annotation: what the agent publishes, allowed.
    agent.patch_node(mine, {"metadata": {"annotations": {key: "{}"}}})
    assert installed.core.read_node(mine).metadata.annotations[key] == "{}"

    message = refusal(lambda: agent.patch_node(other, {"metadata": {"annotations": {key: "{}"}}}))
    assert f"may change only its own node, not {other}" in message
    message = refusal(lambda: agent.patch_node(mine, {"metadata": {"labels": {"team": "x"}}}))
    assert "may change only xpushare.io/ labels" in message
    message = refusal(lambda: agent.patch_node(mine, {"metadata": {"annotations": {"owner": "x"}}}))
    assert "may change only xpushare.io/ annotations" in message
    message = refusal(lambda: agent.patch_node(mine, {"spec": {"unschedulable": True}}))
    assert "may not change a node's spec" in message


def test_node_agent_reads_its_nodes_handoff_and_writes_no_lease(installed: Installed) -> None:
    """The handoff Leases (handoff.<node>, in the release's namespace): the agent reads its
    own at Allocate and writes none (kubelet's admission of the pod frees it), so its RBAC
    grants "get leases" only and the API server refuses any Lease write from its token."""
    from kubernetes import client

    from xpushare.codec import (
        HANDOFF_KEY,
        HANDOFF_LEASE_LABEL,
        HANDOFF_LEASE_ROLE,
        TERM_KEY,
        handoff_lease_name,
    )

    mine = "gpu-lease-1"
    admin = client.CoordinationV1Api(installed.plane.api_client())
    nvidia_node(installed, mine, group="lease")
    admin.create_namespaced_lease(
        SYSTEM_NAMESPACE,
        {
            "metadata": {
                "name": handoff_lease_name(mine),
                "labels": {HANDOFF_LEASE_LABEL: HANDOFF_LEASE_ROLE},
                "annotations": {HANDOFF_KEY: "{}", TERM_KEY: "3"},
            },
            "spec": {"holderIdentity": mine},
        },
    )
    pod = agent_pod(installed, mine)
    kubeconfig = installed.plane.token_kubeconfig(
        SYSTEM_NAMESPACE, AGENT_ACCOUNT, pod=(pod.metadata.name, pod.metadata.uid)
    )
    agent = client.CoordinationV1Api(installed.plane.api_client(kubeconfig))
    read = agent.read_namespaced_lease(handoff_lease_name(mine), SYSTEM_NAMESPACE)
    assert read.metadata.annotations[HANDOFF_KEY] == "{}"
    release = {"metadata": {"annotations": {HANDOFF_KEY: None}}}
    leader = f"{RELEASE}-xpushare-scheduler"
    for name in (handoff_lease_name(mine), leader):
        with pytest.raises(ApiException) as refused:
            agent.patch_namespaced_lease(name, SYSTEM_NAMESPACE, release)
        assert refused.value.status == 403, refused.value
    lease = admin.read_namespaced_lease(handoff_lease_name(mine), SYSTEM_NAMESPACE)
    assert lease.metadata.annotations == {HANDOFF_KEY: "{}", TERM_KEY: "3"}


#: A tenant of the pods' namespace: may create, read and patch pods there, nothing more.
TENANT = "tenant"


def tenant_client(installed: Installed) -> Any:
    """The API as a tenant with namespace-scoped pod rights (a Role, not the scheduler's)."""
    from kubernetes import client
    from realkit import PODS_NAMESPACE

    core = installed.core
    rbac = client.RbacAuthorizationV1Api(installed.plane.api_client())
    core.create_namespaced_service_account(PODS_NAMESPACE, {"metadata": {"name": TENANT}})
    rbac.create_namespaced_role(
        PODS_NAMESPACE,
        {
            "metadata": {"name": TENANT},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "verbs": ["get", "list", "create", "patch", "update"],
                }
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        PODS_NAMESPACE,
        {
            "metadata": {"name": TENANT},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TENANT},
            "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": PODS_NAMESPACE}],
        },
    )
    return installed.plane.core(installed.plane.token_kubeconfig(PODS_NAMESPACE, TENANT))


def test_a_pod_owner_cannot_edit_the_allocation_record(installed: Installed) -> None:
    """Issue 31, defect 2, in the API server: the chart's allocation-record policy refuses a
    tenant's removal or rewrite of a bound pod's assignment, and lets other edits through."""
    from realkit import PODS_NAMESPACE, assigned, hami_pod, wait_pod

    from xpushare.codec import ASSIGNMENT_KEY

    nvidia_node(installed, "gpu-tenant-1", group="tenant")
    tenant = tenant_client(installed)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    tenant.create_namespaced_pod(PODS_NAMESPACE, hami_pod("owned-1", "tenant", **limits))

    pod = wait_pod(installed, "owned-1", assigned, "bound with an assignment")
    record = pod["metadata"]["annotations"][ASSIGNMENT_KEY]
    account = f"system:serviceaccount:{PODS_NAMESPACE}:{TENANT}"
    for edit in ({ASSIGNMENT_KEY: None}, {ASSIGNMENT_KEY: record.replace("8000", "1")}):
        message = refusal(
            lambda a=edit: tenant.patch_namespaced_pod(
                "owned-1", PODS_NAMESPACE, {"metadata": {"annotations": a}}
            )
        )
        assert f"{account} may not set, change or remove" in message
    # Everything else of the pod stays the owner's.
    tenant.patch_namespaced_pod(
        "owned-1",
        PODS_NAMESPACE,
        {"metadata": {"labels": {"team": "a"}, "annotations": {"n": "1"}}},
    )
    stored = installed.core.read_namespaced_pod("owned-1", PODS_NAMESPACE)
    assert stored.metadata.annotations[ASSIGNMENT_KEY] == record
    assert stored.metadata.labels["team"] == "a"

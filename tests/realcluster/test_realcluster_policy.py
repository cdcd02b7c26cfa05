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

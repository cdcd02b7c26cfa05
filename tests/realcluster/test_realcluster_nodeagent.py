"""The node agent on its ServiceAccount's pod-bound token, under the chart's RBAC and its
node-scoped ValidatingAdmissionPolicy, against the real kube-apiserver.

The agent here is the real one (``xpushare.testing.nodeagent.run_node_agent``: the mock
vendor's devices, a fake kubelet over kubelet's gRPC API) with the token kubelet would mount
in its DaemonSet pod: what it reads and writes in the API server (its Node's inventory
annotation, the pods of its node) must be granted by the chart's ClusterRole and pass the
policy that limits it to its own node, or the inventory never appears.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from chartkit import RELEASE
from realkit import GROUP_LABEL, SYSTEM_NAMESPACE, Installed

from xpushare.codec import decode_inventory, inventory_key
from xpushare.node.kube import KubeClient
from xpushare.plugins.builtin import mock
from xpushare.testing.hosts import vendor_host
from xpushare.testing.nodeagent import run_node_agent, short_socket_dir
from xpushare.testing.realcluster import create_ready_node, ready_node

pytestmark = pytest.mark.realcluster

AGENT_ACCOUNT = f"{RELEASE}-xpushare-node"
#: Bound of the wait for the agent's first inventory (it publishes within a second).
PUBLISH_WAIT_S = 30.0


async def test_agent_publishes_its_inventory_with_least_privilege(
    installed: Installed, caplog: pytest.LogCaptureFixture
) -> None:
    name = "gpu-agent-real"
    create_ready_node(installed.core, ready_node(name, labels={GROUP_LABEL: "agent-real"}))
    pod = installed.core.create_namespaced_pod(
        SYSTEM_NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"agent-{name}", "namespace": SYSTEM_NAMESPACE},
            "spec": {
                "nodeName": name,
                "serviceAccountName": AGENT_ACCOUNT,
                "containers": [{"name": "agent", "image": "xpushare"}],
            },
        },
    )
    kubeconfig = installed.plane.token_kubeconfig(
        SYSTEM_NAMESPACE, AGENT_ACCOUNT, pod=(pod.metadata.name, pod.metadata.uid)
    )
    kube = KubeClient.from_environment(
        name, kubeconfig=str(kubeconfig), handoff_namespace=SYSTEM_NAMESPACE
    )
    host = vendor_host("mock", mock, {"devices": "2x A100-80GB"}, node_name=name)
    key = inventory_key("mock")

    def published() -> str | None:
        annotations = installed.core.read_node(name).metadata.annotations or {}
        return annotations.get(key)

    caplog.set_level(logging.WARNING)
    with short_socket_dir("xrc") as plugin_dir:
        async with run_node_agent(host, kube, plugin_dir, wait_for="xpushare.io/mock-gpu"):
            deadline = time.monotonic() + PUBLISH_WAIT_S
            while published() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            raw = published()
    kube.close()
    assert raw is not None, "the agent's inventory never reached its Node:\n" + caplog.text
    inventory = decode_inventory(key, raw)
    assert [d.memory_mib for d in inventory.devices] == [81920, 81920]
    refused = [r.getMessage() for r in caplog.records if "403" in r.getMessage()]
    assert not refused, refused

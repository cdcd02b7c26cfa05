"""A real kubelet's DRA manager calling our node agent's DRA plugin.

One node for the module: kubelet in front of our fake container runtime, and the node agent
in ``dra`` mode with NVIDIA over the fake NVML (two A100s). kubelet finds our plugin through
its plugin watcher (``plugins_registry``), kube-scheduler allocates a claim from the chart's
DeviceClass on our ResourceSlices, kubelet calls NodePrepareResources and hands our CDI
device names to the runtime, and NodeUnprepareResources once the pod is gone. kubelet wipes
the node's ResourceSlices when it starts; ours come back from the agent's watch on them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nvidia_fake import FakeNvidia
from realkit import (
    GROUP_LABEL,
    PODS_NAMESPACE,
    SYSTEM_NAMESPACE,
    Installed,
    agent_kubeconfig,
    eventually,
    gone,
    wait_pod,
)

from xpushare.node.dra.checkpoint import cdi_file_name, cdi_kind
from xpushare.node.dra.slices import driver_name
from xpushare.node.kube import KubeClient
from xpushare.testing.realcluster import AgentThread, KubeletNode, config_for

pytestmark = pytest.mark.realcluster

NODE = "kubelet-dra"
GROUP = "kubelet-dra"
DRIVER = driver_name("nvidia")

#: Bound of waits for what kubelet does within seconds on a working node: only so a broken
#: flow fails.
KUBELET_WAIT_S = 60.0


@dataclass
class DraNode:
    installed: Installed
    node: KubeletNode
    agent: AgentThread
    cdi_dir: Path

    def slices(self) -> list[dict[str, Any]]:
        from kubernetes import client

        api = client.ResourceV1Api(self.installed.plane.api_client())
        found = api.list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
        return [self.installed.core.api_client.sanitize_for_serialization(s) for s in found]


@pytest.fixture(scope="module")
def dra_node(installed: Installed, fake_nvidia: FakeNvidia) -> Iterator[DraNode]:
    fake_nvidia.fake.add_gpus(2)
    with KubeletNode(installed.plane, NODE, labels={GROUP_LABEL: GROUP}) as node:
        kube = KubeClient.from_environment(
            NODE,
            kubeconfig=str(agent_kubeconfig(installed, NODE)),
            handoff_namespace=SYSTEM_NAMESPACE,
        )
        config = config_for(node, mode="dra")
        with AgentThread(config, fake_nvidia.host(NODE), kube) as agent:
            yield DraNode(installed, node, agent, config.cdi_dir)


def driver_registered(node: DraNode) -> bool:
    agent = node.agent.agent
    return (
        agent is not None
        and "nvidia" in agent.dra_plugins
        and agent.dra_plugins["nvidia"].registered
    )


def test_kubelet_registers_our_driver_and_our_slices_are_published(dra_node: DraNode) -> None:
    dra_node.agent.wait(lambda _: driver_registered(dra_node), "DRA driver registered with kubelet")
    assert eventually(lambda: _devices(dra_node) == 2, KUBELET_WAIT_S), dra_node.slices()
    kubelet = dra_node.node.kubelet
    assert kubelet is not None
    assert DRIVER in kubelet.log_path.read_text(errors="replace")


def test_kubelet_prepares_a_claim_for_the_runtime_and_unprepares_it(dra_node: DraNode) -> None:
    installed = dra_node.installed
    dra_node.agent.wait(lambda _: driver_registered(dra_node), "DRA driver registered with kubelet")
    assert eventually(lambda: _devices(dra_node) == 2, KUBELET_WAIT_S), dra_node.slices()
    installed.plane.apply([claim_template("kubelet-a100")])
    installed.core.create_namespaced_pod(PODS_NAMESPACE, claim_pod("dra-run", "kubelet-a100"))
    pod = wait_pod(
        installed,
        "dra-run",
        lambda p: (p.get("status") or {}).get("phase") == "Running",
        "running",
        deadline=time.monotonic() + KUBELET_WAIT_S,
    )
    assert pod["spec"]["nodeName"] == NODE
    (status,) = pod["status"]["resourceClaimStatuses"]
    claim_name = status["resourceClaimName"]
    from kubernetes import client

    resource = client.ResourceV1Api(installed.plane.api_client())
    claim = resource.read_namespaced_resource_claim(claim_name, PODS_NAMESPACE)
    uid = claim.metadata.uid

    # kubelet passed our CDI device (from NodePrepareResources) to the runtime.
    (record,) = dra_node.node.containers(PODS_NAMESPACE, "dra-run")
    names = [d["name"] for d in record["request"]["config"].get("CDI_devices") or []]
    ours = f"{cdi_kind('nvidia')}={uid}-gpu"
    assert ours in names, names
    # The spec the runtime would read for that name: HAMi-core's limits from the claim's
    # consumed capacity.
    spec_file = dra_node.cdi_dir / cdi_file_name("nvidia", uid)
    spec = json.loads(spec_file.read_text())
    (device,) = [d for d in spec["devices"] if f"{spec['kind']}={d['name']}" == ours]
    env = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == "30"

    # The pod deleted: kubelet stops it and calls NodeUnprepareResources, which releases
    # the claim and removes its CDI spec.
    installed.core.delete_namespaced_pod("dra-run", PODS_NAMESPACE, grace_period_seconds=1)
    assert eventually(lambda: gone(installed, "dra-run"), KUBELET_WAIT_S)
    assert eventually(lambda: not spec_file.exists(), KUBELET_WAIT_S), "claim not unprepared"


def test_kubelet_restart_wipes_our_slices_and_the_agent_publishes_them_again(
    dra_node: DraNode,
) -> None:
    dra_node.agent.wait(lambda _: driver_registered(dra_node), "DRA driver registered with kubelet")
    assert eventually(lambda: _devices(dra_node) == 2, KUBELET_WAIT_S), dra_node.slices()
    before = {s["metadata"]["uid"] for s in dra_node.slices()}

    started = time.monotonic()
    dra_node.node.restart()

    def republished() -> bool:
        now = dra_node.slices()
        # Every slice kubelet found was deleted (new uids) and ours are whole again.
        return (
            bool(now)
            and not before & {s["metadata"]["uid"] for s in now}
            and (_devices(dra_node) == 2)
        )

    # The agent's periodic reconciliation runs every ten minutes here (config_for): only
    # its watch on our slices can bring them back within this wait.
    assert eventually(republished, KUBELET_WAIT_S), dra_node.slices()
    took = time.monotonic() - started
    print(f"\nkubelet restarted; our ResourceSlices wiped and back {took:.1f} s after its stop")


def test_kubelet_shows_our_device_health_in_the_pods_status(
    dra_node: DraNode, fake_nvidia: FakeNvidia
) -> None:
    """kubelet 1.36 opens our driver's health stream (DRAResourceHealth, on by default) and
    shows each prepared device's health in the container's status; a GPU that falls off the
    bus turns Unhealthy there, with our reason. Last in the module: its GPUs stay unhealthy."""
    installed = dra_node.installed
    dra_node.agent.wait(lambda _: driver_registered(dra_node), "DRA driver registered with kubelet")
    assert eventually(lambda: _devices(dra_node) == 2, KUBELET_WAIT_S), dra_node.slices()
    installed.plane.apply([claim_template("kubelet-health")])
    installed.core.create_namespaced_pod(PODS_NAMESPACE, claim_pod("dra-health", "kubelet-health"))

    def health(pod: dict[str, Any]) -> list[str]:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return [
            resource.get("health", "")
            for status in statuses
            for entry in status.get("allocatedResourcesStatus") or []
            if entry.get("name", "").startswith("claim:gpu")
            for resource in entry.get("resources") or []
        ]

    def shown(state: str) -> dict[str, Any]:
        return wait_pod(
            installed,
            "dra-health",
            lambda p: health(p) == [state],
            f"its device shown {state}",
            deadline=time.monotonic() + KUBELET_WAIT_S,
        )

    pod = shown("Healthy")
    (entry,) = pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
    (resource,) = entry["resources"]
    # kubelet names the device by the CDI name our NodePrepareResources gave it.
    assert resource["resourceID"].startswith(f"{cdi_kind('nvidia')}="), resource

    for gpu in (0, 1):
        fake_nvidia.fake.push_xid(gpu, 79)  # fallen off the bus: whichever the claim holds
    pod = shown("Unhealthy")
    (entry,) = pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
    print(f"\nkubelet's status of the claim's device: {entry}")
    agent = dra_node.agent.agent
    assert agent is not None and agent.dra_plugins["nvidia"].health.streams >= 1


def _devices(node: DraNode) -> int:
    return sum(len(s["spec"].get("devices") or []) for s in node.slices())


def claim_template(name: str) -> dict[str, Any]:
    """docs/dra.md's example: 8 GiB and 30 % of one A100."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": PODS_NAMESPACE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "nvidia.xpushare.io",
                                "capacity": {"requests": {"memory": "8Gi", "cores": "30"}},
                            },
                        }
                    ]
                }
            }
        },
    }


def claim_pod(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": PODS_NAMESPACE},
        "spec": {
            "schedulerName": "xpushare-scheduler",
            "nodeSelector": {GROUP_LABEL: GROUP},
            "automountServiceAccountToken": False,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }

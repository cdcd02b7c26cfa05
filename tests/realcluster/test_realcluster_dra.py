"""DRA on a real control plane: our ResourceSlices, the chart's DeviceClass, a claim template.

The node agent in ``dra`` mode publishes each device as a ResourceSlice entry that allows
multiple allocations with consumable capacities (memory, cores, shares; KEP 5075, beta and on
by default in Kubernetes 1.36). Here kube-apiserver validates those slices as our code builds
them, kube-controller-manager's resourceclaim controller makes a pod's claim from its
template, and kube-scheduler's DynamicResources plugin allocates it with consumed capacity,
while our extender ranks the nodes (/dra/prioritize) and books each claim in its ledger.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from chartkit import find
from realkit import (
    GROUP_LABEL,
    PODS_NAMESPACE,
    Installed,
    eventually,
    ledger_memory,
    wait_pod,
)

from xpushare.codec import encode_inventory, inventory_key
from xpushare.models import Device
from xpushare.node.dra.slices import build_slices, device_entry, device_name, driver_name
from xpushare.testing.realcluster import create_ready_node, ready_node

pytestmark = pytest.mark.realcluster

REQUEST_COUNT = "xpushare_scheduler_request_duration_seconds_count"

A100_MIB = 81920


def dra_node(installed: Installed, name: str, group: str, gpus: int = 2) -> list[Device]:
    """A Ready node without device-plugin resources whose NVIDIA devices are published as our
    node agent publishes them in dra mode: ResourceSlices, and the inventory annotation the
    agent keeps in both modes (the scheduler's ledger finds a claim's device by it); the
    devices."""
    devices = [
        Device(
            vendor="nvidia",
            id=f"GPU-{name}-{index}",
            index=index,
            model="NVIDIA A100-SXM4-80GB",
            memory_mib=A100_MIB,
            share_slots=10,
        )
        for index in range(gpus)
    ]
    annotations = {inventory_key("nvidia"): encode_inventory("nvidia", name, devices)}
    node = create_ready_node(
        installed.core, ready_node(name, annotations, labels={GROUP_LABEL: group})
    )
    slices = build_slices(
        node=name,
        node_uid=node.metadata.uid,
        vendor="nvidia",
        devices=[device_entry(d, None, None) for d in devices],
        generation=1,
    )
    installed.plane.apply(slices)
    return devices


def test_claim_template_gets_a_shared_device_with_consumed_capacity(installed: Installed) -> None:
    # The chart's DeviceClasses were created with everything it renders (nodes of both modes).
    classes = find(installed.chart, "DeviceClass")
    assert "nvidia.xpushare.io" in {c["metadata"]["name"] for c in classes}
    # Two nodes: kube-scheduler skips scoring (and our /dra/prioritize) for a single one.
    devices = {name: dra_node(installed, name, group="dra") for name in ("gpu-dra-1", "gpu-dra-2")}
    ranked = installed.metric(REQUEST_COUNT, verb="dra-prioritize")

    # docs/dra.md's example: 8 GiB and 30 % of one A100.
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "a100-8gi-30pct", "namespace": PODS_NAMESPACE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "nvidia.xpushare.io",
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": 'device.attributes["nvidia.xpushare.io"]'
                                            '.model.contains("A100")'
                                        }
                                    }
                                ],
                                "capacity": {"requests": {"memory": "8Gi", "cores": "30"}},
                            },
                        }
                    ]
                }
            }
        },
    }
    installed.plane.apply([template])
    pods = [dra_pod(f"dra-{i}") for i in range(2)]
    for body in pods:
        installed.core.create_namespaced_pod(PODS_NAMESPACE, body)

    bound = [
        wait_pod(
            installed, p["metadata"]["name"], lambda p: bool(p["spec"].get("nodeName")), "bound"
        )
        for p in pods
    ]
    nodes = {p["spec"]["nodeName"] for p in bound}
    assert nodes <= set(devices)
    resource = client_resource(installed)
    claims = resource.list_namespaced_resource_claim(PODS_NAMESPACE).items
    ours = [c for c in claims if c.metadata.name.startswith("dra-")]
    # One claim per pod, made from the template by kube-controller-manager.
    assert len(ours) == 2, [c.metadata.name for c in claims]
    by_name = {device_name(d.id): (node, d.id) for node, found in devices.items() for d in found}
    booked: dict[str, Counter[str]] = {node: Counter() for node in devices}
    for claim in ours:
        (result,) = claim.status.allocation.devices.results
        assert result.driver == driver_name("nvidia")
        assert result.pool in nodes
        node, device_id = by_name[result.device]
        assert node == result.pool
        # Consumable capacity: the claim holds part of the device, not all of it.
        assert result.consumed_capacity["memory"] == "8Gi"
        assert result.consumed_capacity["cores"] == "30"
        assert result.consumed_capacity["shares"] == "1"
        assert result.share_id
        booked[node][device_id] += 8192
    # Our extender ranked the nodes (the chart's second extender entry), and our ledger books
    # each claim on its device with the memory it consumed.
    assert installed.metric(REQUEST_COUNT, verb="dra-prioritize") > ranked
    wanted = {node: dict(memory) for node, memory in booked.items()}

    def ledger() -> dict[str, dict[str, int]]:
        return {node: ledger_memory(installed, node) for node in booked}

    assert eventually(lambda: ledger() == wanted), (ledger(), wanted)


def is_bound(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName"))


def dra_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": PODS_NAMESPACE},
        "spec": {
            "schedulerName": "xpushare-scheduler",
            "nodeSelector": {GROUP_LABEL: "dra"},
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "a100-8gi-30pct"}],
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


def client_resource(installed: Installed) -> Any:
    from kubernetes import client

    return client.ResourceV1Api(installed.plane.api_client())

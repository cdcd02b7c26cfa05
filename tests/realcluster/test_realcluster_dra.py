"""DRA on a real control plane: our ResourceSlices, the chart's DeviceClass, a claim template.

The node agent in ``dra`` mode publishes each device as a ResourceSlice entry that allows
multiple allocations with consumable capacities (memory, cores, shares; KEP 5075, beta and on
by default in Kubernetes 1.36). Here kube-apiserver validates those slices as our code builds
them, kube-controller-manager's resourceclaim controller makes a pod's claim from its
template, and kube-scheduler's DynamicResources plugin allocates it with consumed capacity,
then calls our extender to bind.
"""

from __future__ import annotations

from typing import Any

import pytest
from chartkit import find, render, strip
from realkit import GROUP_LABEL, PODS_NAMESPACE, Installed, wait_pod

from xpushare.models import Device
from xpushare.node.dra.slices import build_slices, device_entry, device_name, driver_name
from xpushare.testing.realcluster import create_ready_node, ready_node

pytestmark = pytest.mark.realcluster

A100_MIB = 81920


def dra_node(installed: Installed, name: str, group: str, gpus: int = 2) -> list[Device]:
    """A Ready node without device-plugin resources, its NVIDIA devices published as our
    node agent publishes them in dra mode; the devices."""
    node = create_ready_node(installed.core, ready_node(name, labels={GROUP_LABEL: group}))
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
    # The chart's DeviceClasses, as it renders them for dra mode.
    classes = find(render({"nodeAgent": {"mode": "dra"}}), "DeviceClass")
    assert classes, "the chart renders no DeviceClass in dra mode"
    installed.plane.apply([strip(c) for c in classes])
    devices = dra_node(installed, "gpu-dra-1", group="dra")

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
    assert {p["spec"]["nodeName"] for p in bound} == {"gpu-dra-1"}
    resource = client_resource(installed)
    claims = resource.list_namespaced_resource_claim(PODS_NAMESPACE).items
    ours = [c for c in claims if c.metadata.name.startswith("dra-")]
    # One claim per pod, made from the template by kube-controller-manager.
    assert len(ours) == 2, [c.metadata.name for c in claims]
    names = {device_name(d.id) for d in devices}
    for claim in ours:
        (result,) = claim.status.allocation.devices.results
        assert result.driver == driver_name("nvidia")
        assert result.pool == "gpu-dra-1"
        assert result.device in names
        # Consumable capacity: the claim holds part of the device, not all of it.
        assert result.consumed_capacity["memory"] == "8Gi"
        assert result.consumed_capacity["cores"] == "30"
        assert result.consumed_capacity["shares"] == "1"
        assert result.share_id


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

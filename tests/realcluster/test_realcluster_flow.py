"""A HAMi-style pod through the real control plane: kube-apiserver calls our webhook over TLS,
kube-scheduler (configured by the chart's own KubeSchedulerConfiguration) calls our /filter,
/prioritize and /bind, and the pod ends bound with its assignment written.

Every other test of these paths talks to doubles we wrote; here the API server validates every
object and request we make, and kube-scheduler decides when and how to call the extender.
"""

from __future__ import annotations

from typing import Any

import pytest
from realkit import PODS_NAMESPACE, Installed, hami_pod, nvidia_node, wait_pod

from xpushare.codec import ASSIGNMENT_KEY, decode_assignment

pytestmark = pytest.mark.realcluster

REQUEST_COUNT = "xpushare_scheduler_request_duration_seconds_count"


def assigned(pod: dict[str, Any]) -> bool:
    annotations = pod["metadata"].get("annotations") or {}
    return bool(pod["spec"].get("nodeName")) and ASSIGNMENT_KEY in annotations


def test_hami_pod_is_admitted_scheduled_and_bound_by_our_extender(installed: Installed) -> None:
    # Two nodes: kube-scheduler skips scoring (and /prioritize) when one node is feasible.
    nodes = {"gpu-flow-1", "gpu-flow-2"}
    for name in sorted(nodes):
        nvidia_node(installed, name, group="flow")
    verbs = ("filter", "prioritize", "bind")
    calls = {verb: installed.metric(REQUEST_COUNT, verb=verb) for verb in verbs}

    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    created = installed.core.create_namespaced_pod(
        PODS_NAMESPACE, hami_pod("hami-1", "flow", **limits)
    )
    # kube-apiserver called our webhook over TLS (the chart's rules and matchConditions) and
    # stored the pod with its patch applied.
    assert created.spec.scheduler_name == "xpushare-scheduler"

    bound = wait_pod(installed, "hami-1", assigned, "bound with an assignment")
    node = bound["spec"]["nodeName"]
    assert node in nodes
    assignment = decode_assignment(bound["metadata"]["annotations"][ASSIGNMENT_KEY])
    assert assignment.node == node
    (container,) = assignment.containers
    assert (container.container, container.vendor) == ("main", "nvidia")
    (device,) = container.devices
    # "8000" reached the webhook as "8k" (the API server's canonical form): 8000 MiB.
    assert device.memory_mib == 8000
    assert device.device_id.startswith(f"GPU-{node}-")
    # kube-scheduler reached its decision through our extender: it called every verb.
    for verb, before in calls.items():
        assert installed.metric(REQUEST_COUNT, verb=verb) > before, f"/{verb} was not called"

"""A HAMi-style pod through the real control plane: kube-apiserver calls our webhook over TLS,
kube-scheduler (configured by the chart's own KubeSchedulerConfiguration) calls our /filter,
/prioritize and /bind, and the pod ends bound with its assignment written.

Every other test of these paths talks to doubles we wrote; here the API server validates every
object and request we make, and kube-scheduler decides when and how to call the extender.
"""

from __future__ import annotations

from typing import Any

import pytest
from realkit import (
    A100_MIB,
    PODS_NAMESPACE,
    Installed,
    assigned,
    hami_pod,
    ledger_memory,
    nvidia_node,
    recount,
    wait_pod,
)

from xpushare.codec import ASSIGNMENT_KEY, decode_assignment
from xpushare.testing.realcluster import KubeletStandin

pytestmark = pytest.mark.realcluster

REQUEST_COUNT = "xpushare_scheduler_request_duration_seconds_count"
SHORTLISTS = "xpushare_scheduler_filter_shortlists_total"

#: Words of /filter's reason for a node whose devices are all too small.
REASON = "4 not enough free device memory"


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


#: The burst of the issue: 50 pods created at once onto one node.
BURST = 50


def test_burst_of_pods_onto_one_node_is_bound_without_overcommit(installed: Installed) -> None:
    node = "gpu-burst-1"
    # 8 A100s of 10 shares: 80 slots, 10 pods of 8000 MiB fit each GPU's 81920 MiB.
    nvidia_node(installed, node, group="burst", gpus=8)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    names = [f"burst-{i}" for i in range(BURST)]
    with KubeletStandin(installed.core, {node}) as kubelet:
        for name in names:
            installed.core.create_namespaced_pod(PODS_NAMESPACE, hami_pod(name, "burst", **limits))
        pods = [wait_pod(installed, name, assigned, "bound with an assignment") for name in names]
    assert {p["spec"]["nodeName"] for p in pods} == {node}
    assert sorted(pod for _, pod in kubelet.admitted) == sorted(names)
    # The safety property, recounted from the API server alone: no GPU booked past its memory
    # or its share slots; and our scheduler's ledger holds what the recount holds.
    memory, shares = recount(pods)
    assert sum(shares.values()) == BURST
    assert max(memory.values()) <= A100_MIB, memory
    assert max(shares.values()) <= 10, shares
    assert ledger_memory(installed, node) == dict(memory)


def test_unschedulable_pod_carries_our_reason(installed: Installed) -> None:
    # T4s of 15 GiB, the only node the pod may go to; an A100 elsewhere makes the webhook
    # admit it (some device in the cluster is large enough), /filter refuses the T4 node.
    nvidia_node(installed, "gpu-elsewhere-1", group="elsewhere")
    nvidia_node(installed, "gpu-small-1", group="small", model="Tesla T4", memory_mib=15360)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"}
    installed.core.create_namespaced_pod(PODS_NAMESPACE, hami_pod("too-big", "small", **limits))

    def refused(p: dict[str, Any]) -> bool:
        return any(
            c["type"] == "PodScheduled" and c["status"] == "False"
            for c in (p.get("status") or {}).get("conditions") or []
        )

    pod = wait_pod(installed, "too-big", refused, "marked unschedulable")
    (condition,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert condition["reason"] == "Unschedulable"
    assert REASON in condition["message"], condition
    events = installed.core.list_namespaced_event(
        PODS_NAMESPACE, field_selector="involvedObject.name=too-big,reason=FailedScheduling"
    ).items
    assert any(REASON in (e.message or "") for e in events), [e.message for e in events]
    assert not pod["spec"].get("nodeName")


#: More nodes than /filter's shortlist (scheduler/shortlist.py, 16 by default).
SHORTLIST_GROUP = 20


def test_the_shortlist_is_taken_and_a_soft_preference_still_wins(installed: Installed) -> None:
    # The real kube-scheduler gets 16 of the 20 nodes back from /filter and binds to one of
    # them; a pod that prefers a node gets all 20, so kube-scheduler's node affinity score
    # can take it to the node it prefers (the last made: last in kube-scheduler's order,
    # outside a shortlist of equal nodes).
    nodes = [f"gpu-short-{i:02d}" for i in range(SHORTLIST_GROUP)]
    for name in nodes:
        nvidia_node(installed, name, group="short")
    shortened = installed.metric(SHORTLISTS, result="shortened")
    preferred = installed.metric(SHORTLISTS, result="preferences")
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    plain = hami_pod("short-plain", "short", **limits)
    choosy = hami_pod("short-choosy", "short", **limits)
    choosy["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": [nodes[-1]],
                            }
                        ]
                    },
                }
            ]
        }
    }
    with KubeletStandin(installed.core, set(nodes)):
        installed.core.create_namespaced_pod(PODS_NAMESPACE, plain)
        assert wait_pod(installed, "short-plain", assigned, "bound")["spec"]["nodeName"] in nodes
        assert installed.metric(SHORTLISTS, result="shortened") > shortened
        installed.core.create_namespaced_pod(PODS_NAMESPACE, choosy)
        bound = wait_pod(installed, "short-choosy", assigned, "bound")
    assert bound["spec"]["nodeName"] == nodes[-1]
    assert installed.metric(SHORTLISTS, result="preferences") > preferred

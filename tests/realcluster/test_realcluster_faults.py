"""Faults of the real control plane: kube-apiserver killed and restarted in a burst of pods.

Our scheduler's watches break, its writes fail mid-bind, kube-scheduler retries; afterwards
every pod must be bound, no GPU booked twice, and our ledger must equal a recount from the API
server (what a new replica would rebuild). The test has a control plane of its own: the
session's tests must not inherit what the fault leaves behind.
"""

from __future__ import annotations

import sys

import pytest
from realkit import (
    A100_MIB,
    PODS_NAMESPACE,
    Installed,
    assigned,
    eventually,
    hami_pod,
    ledger_memory,
    nvidia_node,
    recount,
    wait_pod,
)

from xpushare.testing.realcluster import KubeletStandin

pytestmark = pytest.mark.realcluster

#: Pods created before and after the restart.
HALF = 20

#: Bound of waits that end within a second on a scheduler whose watches resumed (a new
#: node reaching its ledger, the ledger catching up with the recount).
RESUME_WAIT_S = 15.0

CAPACITY = "xpushare_scheduler_device_memory_capacity_mib"


def test_apiserver_killed_mid_burst_leaves_no_double_booking(own_installed: Installed) -> None:
    installed = own_installed
    node = "gpu-fault-1"
    nvidia_node(installed, node, group="fault", gpus=8)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    names = [f"fault-{i}" for i in range(2 * HALF)]
    with KubeletStandin(installed.core, {node}):
        for name in names[:HALF]:
            installed.core.create_namespaced_pod(PODS_NAMESPACE, hami_pod(name, "fault", **limits))
        # Some of the first half are being filtered and bound right now.
        away = installed.plane.restart_apiserver(kill=True)
        print(f"kube-apiserver was away {away:.1f} s", file=sys.stderr)
        # Our scheduler's watches resumed: a node made now reaches its ledger.
        nvidia_node(installed, "gpu-fault-2", group="elsewhere")
        assert eventually(lambda: installed.samples(CAPACITY, node="gpu-fault-2"), RESUME_WAIT_S), (
            "our scheduler never saw a node created after the restart"
        )
        for name in names[HALF:]:
            installed.core.create_namespaced_pod(PODS_NAMESPACE, hami_pod(name, "fault", **limits))
        pods = [wait_pod(installed, name, assigned, "bound with an assignment") for name in names]
    assert {p["spec"]["nodeName"] for p in pods} == {node}
    memory, shares = recount(pods)
    assert sum(shares.values()) == 2 * HALF
    assert max(memory.values()) <= A100_MIB, memory
    assert max(shares.values()) <= 10, shares
    assert eventually(lambda: ledger_memory(installed, node) == dict(memory), RESUME_WAIT_S)

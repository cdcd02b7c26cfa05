"""Two replicas of our scheduler on the real Lease API, the leader frozen in a burst of pods.

The leader is SIGSTOPped while kube-scheduler is calling it (a GC pause, a stalled VM), the
Lease passes to the other replica, new pods go to it through the Service (a ReadyProxy here),
and the old leader is resumed after its Lease expired, with requests of kube-scheduler still
queued on its connections. Safety: no GPU is booked past its capacity, whatever order the two
replicas' writes land in, and the replica that lost the Lease stops answering as leader.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from chartkit import RELEASE
from realkit import (
    A100_MIB,
    PODS_NAMESPACE,
    SYSTEM_NAMESPACE,
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

PODS = 30
#: Pods bound before the leader is frozen: the burst is under way.
BEFORE_FREEZE = 5
#: Bound of the wait for every pod to be bound once the old leader is resumed (about 10 s on
#: working code: kube-scheduler's calls stuck on the frozen replica time out after the
#: chart's httpTimeout of 15 s, then go to the new leader).
AFTER_THAW_WAIT_S = 30.0
#: Bound of the wait for the Lease to change hands (4 s lease, 0.5 s retries).
FAILOVER_WAIT_S = 30.0


def holder(installed: Installed) -> str:
    from kubernetes import client

    coordination = client.CoordinationV1Api(installed.plane.api_client())
    lease = coordination.read_namespaced_lease(f"{RELEASE}-xpushare-scheduler", SYSTEM_NAMESPACE)
    return str(lease.spec.holder_identity or "")


def readyz(url: str, installed: Installed) -> int:
    import ssl

    assert installed.plane.pki is not None
    context = ssl.create_default_context(cafile=str(installed.plane.pki.ca_cert))
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def create_retrying(core: Any, body: dict[str, Any]) -> int:
    """Create *body*, retrying while the webhook cannot be reached; the failures. kube-apiserver
    keeps its connection to the frozen replica: each call on it times out (the chart's 5 s)
    and fails the create (failurePolicy Fail) until Go's client drops that connection and
    opens a new one, which the Service sends to the new leader."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + FAILOVER_WAIT_S
    failures = 0
    while True:
        try:
            core.create_namespaced_pod(PODS_NAMESPACE, body)
            return failures
        except ApiException as exc:
            if exc.status != 500 or "failed calling webhook" not in str(exc.body):
                raise
            failures += 1
            if time.monotonic() > deadline:
                raise


def test_leader_frozen_mid_burst_and_resumed_books_no_gpu_twice(replicated: Installed) -> None:
    installed = replicated
    nodes = {"gpu-lead-1", "gpu-lead-2"}
    for name in sorted(nodes):
        nvidia_node(installed, name, group="lead")
    assert holder(installed) == "replica-0"
    leader = installed.plane.component("xpushare-scheduler")
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    names = [f"lead-{i}" for i in range(PODS)]
    core = installed.core
    with KubeletStandin(core, nodes):
        for name in names[: PODS // 2]:
            core.create_namespaced_pod(PODS_NAMESPACE, hami_pod(name, "lead", **limits))

        def bound_count() -> int:
            pods = core.list_namespaced_pod(PODS_NAMESPACE, label_selector=None).items
            return sum(1 for p in pods if p.metadata.name.startswith("lead-") and p.spec.node_name)

        assert eventually(lambda: bound_count() >= BEFORE_FREEZE, 60)
        os.kill(leader.process.pid, signal.SIGSTOP)
        try:
            assert eventually(lambda: holder(installed) == "replica-1", FAILOVER_WAIT_S)
            refused = 0
            for name in names[PODS // 2 :]:
                refused += create_retrying(core, hami_pod(name, "lead", **limits))
            print(f"pod creations refused while the leader was frozen: {refused}", file=sys.stderr)
            time.sleep(1)
        finally:
            os.kill(leader.process.pid, signal.SIGCONT)
        deadline = time.monotonic() + AFTER_THAW_WAIT_S
        pods = [
            wait_pod(installed, name, assigned, "bound with an assignment", deadline=deadline)
            for name in names
        ]
    assert {p["spec"]["nodeName"] for p in pods} <= nodes
    memory, shares = recount(pods)
    assert sum(shares.values()) == PODS
    assert max(memory.values()) <= A100_MIB, memory
    assert max(shares.values()) <= 10, shares
    # The resumed replica learnt it lost the Lease; the new leader's ledger is the recount.
    assert eventually(lambda: readyz(installed.replica_urls[0], installed) == 503)
    assert holder(installed) == "replica-1"
    for node in nodes:
        wanted = {d: m for d, m in memory.items() if d.startswith(f"GPU-{node}-")}
        assert eventually(lambda node=node, wanted=wanted: ledger_memory(installed, node) == wanted)

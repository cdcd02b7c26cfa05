"""Faults of the real control plane: etcd compacted while our scheduler was cut off from
kube-apiserver, so its watches cannot resume (410 Gone) and it must relist.

What a relist must get right here is what the ledger issue was about: pods deleted while
nobody watched are gone from the list, so their bookings are freed by the relist alone, and
nothing else is freed. The next burst needs exactly the freed room: if the relist freed too
little, a pod of it stays Pending; if it freed too much (or the ledger lost a booking), a
pod past the room binds and the recount from the API server shows a GPU booked twice.

Our scheduler reaches kube-apiserver through a :class:`CutProxy`: the cut closes its
connections with whatever was in flight, so no event of the deletions reaches it, while
kube-scheduler and the API server go on. kube-apiserver runs with ``--watch-cache=false``,
so its watches are served by etcd and a watch resumed from before the compaction is
answered 410 as etcd decides (with the watch cache, a resumed watch within the cache's
window is served from memory whatever etcd compacted).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from realkit import (
    A100_MIB,
    PODS_NAMESPACE,
    Installed,
    assigned,
    eventually,
    hami_pod,
    install,
    ledger_memory,
    nvidia_node,
    recount,
    wait_pod,
)

from xpushare.testing.realcluster import ControlPlane, KubeletStandin

pytestmark = pytest.mark.realcluster


@pytest.fixture(scope="module")
def cut_off(kube_binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """A control plane of the module's own (watches served by etcd) with xpushare on it,
    our scheduler behind a :class:`CutProxy`."""
    work = tmp_path_factory.mktemp("realcluster-compaction")
    with ControlPlane(kube_binaries, work, apiserver_args=("--watch-cache=false",)) as plane:
        yield install(plane, api_proxy=True)


#: 8 A100s of 81,920 MiB: two pods of 40,000 MiB fit each GPU, 16 fill the node.
GPUS = 8
POD_MIB = 40_000
FULL = 2 * GPUS
#: Deleted while our scheduler is stopped: the room the relist must free.
DELETED = GPUS

#: Bound of waits that end within a second or two once our scheduler runs again (its
#: watches resume, get 410, relist).
RESUME_WAIT_S = 30.0

EXPIRED = "xpushare_scheduler_watch_expired_total"


def expired(installed: Installed, resource: str) -> bool:
    return installed.metric(EXPIRED, resource=resource) >= 1


def refused(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "PodScheduled" and c["status"] == "False" and c["reason"] == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def test_compacted_etcd_makes_watches_relist_and_frees_only_what_was_deleted(
    cut_off: Installed,
) -> None:
    installed = cut_off
    core = installed.core
    proxy = installed.api_proxy
    assert proxy is not None
    node = "gpu-compact-1"
    nvidia_node(installed, node, group="compact", gpus=GPUS)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(POD_MIB)}
    first = [f"compact-{i}" for i in range(FULL)]
    later = [f"compact-later-{i}" for i in range(DELETED)]
    ours = installed.plane.component("xpushare-scheduler")
    with KubeletStandin(core, {node}):
        for name in first:
            core.create_namespaced_pod(PODS_NAMESPACE, hami_pod(name, "compact", **limits))
        for name in first:
            wait_pod(installed, name, assigned, "bound with an assignment")
        assert installed.metric(EXPIRED) == 0

        # Our scheduler is cut off; meanwhile half the pods go away, a node comes, and etcd
        # forgets the history in between.
        proxy.cut()
        try:
            for name in first[:DELETED]:
                core.delete_namespaced_pod(name, PODS_NAMESPACE, grace_period_seconds=0)
            nvidia_node(installed, "gpu-compact-2", group="compact-elsewhere")
            revision = installed.plane.compact_etcd()
        finally:
            proxy.heal()
        print(f"etcd compacted at revision {revision}", file=sys.stderr)

        for resource in ("pods", "nodes"):
            assert eventually(lambda r=resource: expired(installed, r), RESUME_WAIT_S), (
                f"our {resource} watch never got 410 Gone after the compaction:\n" + ours.log_tail()
            )
        kept = [
            core.api_client.sanitize_for_serialization(
                core.read_namespaced_pod(name, PODS_NAMESPACE)
            )
            for name in first[DELETED:]
        ]
        memory, _ = recount(kept)
        assert eventually(lambda: ledger_memory(installed, node) == dict(memory), RESUME_WAIT_S), (
            ledger_memory(installed, node),
            dict(memory),
        )
        # The new node reached the ledger through the node relist.
        assert installed.samples(
            "xpushare_scheduler_device_memory_capacity_mib", node="gpu-compact-2"
        )

        # Exactly the freed room: all of these bind, one more does not.
        for name in later:
            core.create_namespaced_pod(PODS_NAMESPACE, hami_pod(name, "compact", **limits))
        pods = kept + [wait_pod(installed, n, assigned, "bound with an assignment") for n in later]
        core.create_namespaced_pod(PODS_NAMESPACE, hami_pod("compact-extra", "compact", **limits))
        extra = wait_pod(installed, "compact-extra", refused, "marked unschedulable")
    assert not extra["spec"].get("nodeName")
    memory, shares = recount(pods)
    assert sum(shares.values()) == FULL
    assert max(memory.values()) <= A100_MIB, memory
    assert eventually(lambda: ledger_memory(installed, node) == dict(memory), RESUME_WAIT_S)

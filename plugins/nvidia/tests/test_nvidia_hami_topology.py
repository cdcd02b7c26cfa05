"""A node HAMi registered, with HAMi's pair scores: two GPUs go to its NVLinked pair.

The scheduler-side host is built as ``xpushare scheduler`` builds it (no node, no NVML); the
node comes through the cluster state, as from the watch.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from xpushare.models import ContainerRequest
from xpushare.placement import Placer
from xpushare.placement.config import PlacementConfig
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduling import PodRequest, UsageLedger
from xpushare.scheduling.podpolicy import GPU_POLICY_KEY, pod_policy
from xpushare.testing.hosts import vendor_host
from xpushare_nvidia import plugin

#: Four GPUs; HAMi scored 2-3 with four NVLinks, every other pair over PCIe.
REGISTER = json.dumps(
    [
        {
            "id": f"GPU-{i}",
            "index": i,
            "count": 10,
            "devmem": 81920,
            "devcore": 100,
            "type": "NVIDIA A100",
            "health": True,
            "numa": 0,
        }
        for i in range(4)
    ]
)
SCORES = json.dumps(
    [
        {
            "uuid": f"GPU-{i}",
            "score": {f"GPU-{j}": (420 if {i, j} == {2, 3} else 20) for j in range(4) if j != i},
        }
        for i in range(4)
    ]
)


def test_hami_pair_scores_steer_two_gpus_to_the_nvlinked_pair() -> None:
    host = vendor_host("nvidia", plugin, {}, node_name=None)
    try:
        ledger = UsageLedger()
        cluster = ClusterState(ledger)
        annotations = {"hami.io/node-nvidia-register": REGISTER}
        meta = {"name": "n", "resourceVersion": "1", "annotations": annotations}
        cluster.apply_node({"metadata": meta})
        placer = Placer(ledger, "binpack", host=host)
        two = PodRequest.build([ContainerRequest(vendor="nvidia", count=2, memory_mib=1000)])
        without = {d.device_id for d in placer.decide(two, "n").containers[0].devices}
        assert without != {"GPU-2", "GPU-3"}  # no links known: the policy's order
        annotations["hami.io/node-nvidia-score"] = SCORES
        cluster.apply_node({"metadata": {**meta, "resourceVersion": "2"}})
        with_scores = {d.device_id for d in placer.decide(two, "n").containers[0].devices}
        assert with_scores == {"GPU-2", "GPU-3"}
    finally:
        host.close()


# -- HAMi's topology-aware GPU policy: one GPU to the least-connected candidate --------------


def _scores(pairs: dict[frozenset[int], int], default: int = 20) -> str:
    return json.dumps(
        [
            {
                "uuid": f"GPU-{i}",
                "score": {
                    f"GPU-{j}": pairs.get(frozenset((i, j)), default) for j in range(4) if j != i
                },
            }
            for i in range(4)
        ]
    )


def _placer(scores: str, config: PlacementConfig | None = None) -> tuple[Placer, Any]:
    host = vendor_host("nvidia", plugin, {}, node_name=None)
    ledger = UsageLedger()
    cluster = ClusterState(ledger)
    annotations = {"hami.io/node-nvidia-register": REGISTER, "hami.io/node-nvidia-score": scores}
    cluster.apply_node(
        {"metadata": {"name": "n", "resourceVersion": "1", "annotations": annotations}}
    )
    return Placer(ledger, "binpack", host=host, config=config), host


def _picked(placer: Placer, gpu_policy: str | None, **request: Any) -> list[str]:
    policy = pod_policy({GPU_POLICY_KEY: gpu_policy} if gpu_policy is not None else {})
    asked = ContainerRequest(vendor="nvidia", memory_mib=1000, **request)
    pod = PodRequest.build([asked], policy=policy)
    return [d.device_id for d in placer.decide(pod, "n").containers[0].devices]


#: GPU-1, GPU-2 and GPU-3 are linked by NVLink; GPU-0 reaches them over PCIe only.
ISLAND = _scores({frozenset((1, 2)): 420, frozenset((1, 3)): 220, frozenset((2, 3)): 220})


@pytest.mark.parametrize(
    "gpu_policy", ["topology-aware", "mutex,topology-aware", "spread,topology-aware"]
)
def test_one_gpu_goes_to_the_least_connected_under_topology_aware(gpu_policy: str) -> None:
    placer, host = _placer(ISLAND)
    try:
        assert _picked(placer, "spread") == ["GPU-3"]  # HAMi's walk: the highest index first
        assert _picked(placer, gpu_policy) == ["GPU-0"]  # sums: 60 against 460 and more
    finally:
        host.close()


def test_the_configured_topology_aware_policy_applies_unless_the_pod_chooses_another() -> None:
    placer, host = _placer(ISLAND, PlacementConfig(device_policy="topology-aware"))
    try:
        assert _picked(placer, None) == ["GPU-0"]
        assert _picked(placer, "spread") == ["GPU-3"]  # the pod's own GPU policy wins
    finally:
        host.close()


def test_only_the_other_candidates_links_count() -> None:
    # With GPU-3 among them GPU-0 and GPU-2 would be least connected (140); without it
    # (the pod excludes it), GPU-1 is (40 against 120).
    scores = _scores({frozenset((1, 3)): 420, frozenset((0, 2)): 100})
    placer, host = _placer(scores)
    try:
        assert _picked(placer, "topology-aware", uuids_exclude=("GPU-3",)) == ["GPU-1"]
        assert _picked(placer, "topology-aware") == ["GPU-2"]  # 140 each: the first found
    finally:
        host.close()


def test_a_tie_goes_to_the_first_in_the_policys_order() -> None:
    scores = _scores({frozenset((2, 3)): 420})  # GPU-0 and GPU-1: 60 each
    placer, host = _placer(scores)
    try:
        assert _picked(placer, "topology-aware") == ["GPU-1"]  # spread: the higher index
        one = PodRequest.build(
            [ContainerRequest(vendor="nvidia", memory_mib=1000, uuids_include=("GPU-0",))]
        )
        placer.ledger.add("default/first", placer.decide(one, "n"))
        # binpack tries the GPU in use first: now GPU-0 is the first of the two found.
        assert _picked(placer, "binpack,topology-aware") == ["GPU-0"]
    finally:
        host.close()


def test_several_gpus_take_the_best_pcie_set_under_topology_aware() -> None:
    scores = _scores({frozenset((0, 1)): 50}, default=10)  # one PCIe switch, no NVLink
    placer, host = _placer(scores)
    try:
        assert sorted(_picked(placer, "spread", count=2)) == ["GPU-2", "GPU-3"]
        assert sorted(_picked(placer, "topology-aware", count=2)) == ["GPU-0", "GPU-1"]
    finally:
        host.close()

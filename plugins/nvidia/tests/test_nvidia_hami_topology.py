"""A node HAMi registered, with HAMi's pair scores: two GPUs go to its NVLinked pair.

The scheduler-side host is built as ``xpushare scheduler`` builds it (no node, no NVML); the
node comes through the cluster state, as from the watch.
"""

from __future__ import annotations

import json

from xpushare.models import ContainerRequest
from xpushare.placement import Placer
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduling import PodRequest, UsageLedger
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

"""The whole pod flow with AMD GPUs on a fake libamd_smi.

webhook → /filter → /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the AMD inventory it detected through the
plugin, and the fake kubelet admitting the pod over the device-plugin gRPC API: the
container gets the render node of the GPU the scheduler chose, and ``/dev/kfd``.
"""

from __future__ import annotations

from pathlib import Path

from amd_fakes import GIB, amd_host, build_library, mi300x

import xpushare_amd.plugin
from xpushare.testing.apiserver import pod
from xpushare.testing.hosts import vendor_host
from xpushare.testing.kubelet import ContainerSpec
from xpushare.testing.podflow import PodFlow

NODE = "node-a"
GPU = "amd.com/gpu"


async def test_a_pod_asking_for_a_share_of_an_amd_gpu_runs_on_the_chosen_gpu(
    tmp_path: Path,
) -> None:
    lib = build_library(tmp_path / "rocm", [mi300x(0), mi300x(1, vram_used=GIB)])
    flow = PodFlow(
        amd_host(lib, node=NODE),
        vendor_host("amd", xpushare_amd.plugin, node_name=None),
        vendor="amd",
        node_name=NODE,
        scheduler_settings={"bind.repair_interval_s": 0.05},
    )
    async with flow:
        wanted = pod(
            "infer",
            limits={GPU: "1", "amd.com/gpumem": "16384", "amd.com/gpucores": "25"},
            annotations={"amd.com/use-gpu-uuid": "e0ff74a1-0000-1000-8000-4d3a0f9e1201"},
        )
        bound = await flow.schedule(wanted)
        result = await flow.allocate(bound, [ContainerSpec("main", {GPU: 1})])
        main = result["main"]
        chosen = "GPU-4d3a0f9e12ab5501"  # the one the UUID annotation allows
        assert main.envs["XPUSHARE_AMD_DEVICES"] == chosen
        assert main.envs["ROCR_VISIBLE_DEVICES"] == "0"
        assert main.envs["XPUSHARE_AMD_MEMORY_LIMIT_0"] == "16384"
        assert main.envs["XPUSHARE_AMD_COMPUTE_UNITS_0"] == "76"  # 25 % of 304 CUs
        assert main.device_specs == {
            "/dev/kfd": ("/dev/kfd", "rw"),
            "/dev/dri/renderD129": ("/dev/dri/renderD129", "rw"),
            "/dev/dri/card1": ("/dev/dri/card1", "rw"),
        }

"""What a container gets for its Iluvatar GPUs: visible devices, and HAMi-core limits.

Iluvatar's container runtime (``runtimeClassName: iluvatar``) injects the GPUs named by
``IX_VISIBLE_DEVICES`` and the corex libraries (gpustack-devices.md §4.5). A slice smaller
than the GPU is enforced by HAMi-core, which works on corex as on CUDA: the same variables as
NVIDIA's (hami-protocol.md §7.1, ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` in MiB with an ``m``
suffix, ``CUDA_DEVICE_SM_LIMIT`` in percent) and ``libvgpu.so`` preloaded through a mounted
``/etc/ld.so.preload``.
"""

from __future__ import annotations

from typing import Final

from xpushare.models import AllocateRequest, ContainerAllocation, DeviceNode, Mount
from xpushare_others.common import devices as nodes
from xpushare_others.iluvatar.config import IluvatarConfig

#: HAMi-core's files in its node directory, and where the preload list goes.
LIBRARY: Final = "libvgpu.so"
PRELOAD: Final = "ld.so.preload"
PRELOAD_TARGET: Final = "/etc/ld.so.preload"


def allocate(config: IluvatarConfig, request: AllocateRequest) -> ContainerAllocation:
    who = f"pod {request.pod}, container {request.container!r} on node {request.node}"
    by_id = {d.id: d for d in request.devices}
    envs = {config.visible_devices_env: ",".join(s.device_id for s in request.slices)}
    devices: list[DeviceNode] = []
    if config.device_nodes:
        for s in request.slices:
            minor = by_id[s.device_id].extra.get("minor")
            if minor is None:
                raise RuntimeError(
                    f"{who}: the minor number of Iluvatar GPU {s.device_id} is unknown, so its "
                    "device node cannot be given; use Iluvatar's container runtime "
                    "(device_nodes: false)"
                )
            devices.append(nodes.node(f"/dev/iluvatar{minor}"))
    mounts: list[Mount] = []
    shared = [
        s
        for s in request.slices
        if s.compute_percent < 100 or s.memory_mib < by_id[s.device_id].memory_mib
    ]
    if shared and config.hami_core:
        library = f"{config.hami_core_dir}/{LIBRARY}"
        if not config.on_host(library).exists():
            raise RuntimeError(
                f"{who}: HAMi-core ({library}) is not on the node, so the GPU slice could not be "
                "enforced; install HAMi-core there or set hami_core: false to share unenforced"
            )
        for i, s in enumerate(request.slices):
            envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{s.memory_mib}m"
        envs["CUDA_DEVICE_SM_LIMIT"] = str(max(s.compute_percent for s in request.slices))
        mounts.append(Mount(host_path=library, container_path=library))
        mounts.append(
            Mount(host_path=f"{config.hami_core_dir}/{PRELOAD}", container_path=PRELOAD_TARGET)
        )
    return ContainerAllocation(envs=envs, devices=tuple(devices), mounts=tuple(mounts))

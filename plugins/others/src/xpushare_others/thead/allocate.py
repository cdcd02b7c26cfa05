"""What a container gets for its PPUs: their nodes, and HGGC's quota for a slice.

Every container gets ``/dev/alixpu`` and ``/dev/alixpu_ctl`` and each PPU's
``/dev/alixpu_ppu<ordinal>`` (gpustack-devices.md §4.5). A slice smaller than the PPU is
enforced by T-Head's HGGC quota shim (§4.5, "sliced"): ``hggc_quota.so`` and
``hgml_dlsym_hook.so`` preloaded through a mounted ``/etc/ld.so.preload``, with
``HGGC_DEVICE_MEMORY_LIMIT_<i>`` (a bare MiB integer, ``i`` the container's own index, in
ascending PPU order), ``HGGC_DEVICE_SM_LIMIT`` (percent, given even at 100: the shim refuses a
card without it), ``HGGC_LEDGER_PATH`` and ``LIBHGGC_LOG_LEVEL`` (unless the pod sets it).
"""

from __future__ import annotations

from typing import Final

from xpushare.models import AllocateRequest, ContainerAllocation, DeviceNode, Mount
from xpushare_others.common import devices as nodes
from xpushare_others.thead.config import TheadConfig

#: The shims GPUStack's T-Head injection preloads, and where the preload list goes.
LIBRARIES: Final = ("hggc_quota.so", "hgml_dlsym_hook.so")
PRELOAD: Final = "ld.so.preload"
PRELOAD_TARGET: Final = "/etc/ld.so.preload"
LOG_ENV: Final = "LIBHGGC_LOG_LEVEL"


def allocate(config: TheadConfig, request: AllocateRequest) -> ContainerAllocation:
    who = f"pod {request.pod}, container {request.container!r} on node {request.node}"
    by_id = {d.id: d for d in request.devices}
    slices = sorted(request.slices, key=lambda s: by_id[s.device_id].index)
    own = [f"/dev/alixpu_ppu{by_id[s.device_id].index}" for s in slices]
    lost = nodes.missing(config, own)
    if lost:
        raise RuntimeError(
            f"{who}: the host has no {', '.join(lost)} for its T-Head PPUs; check the PPU "
            "driver (`ppu-smi`) and that the node agent sees the host's /dev (host_root)"
        )
    devices: list[DeviceNode] = nodes.present(config, config.control_nodes)
    devices.extend(nodes.node(p) for p in own)
    envs: dict[str, str] = {}
    mounts: list[Mount] = []
    sliced = [
        s for s in slices if s.compute_percent < 100 or s.memory_mib < by_id[s.device_id].memory_mib
    ]
    if sliced and config.quota:
        libraries = [f"{config.quota_dir}/{name}" for name in LIBRARIES]
        absent = nodes.missing(config, libraries)
        if absent:
            raise RuntimeError(
                f"{who}: T-Head's HGGC quota shim ({', '.join(absent)}) is not on the node, so "
                "the PPU slice could not be enforced; install it there or set quota: false to "
                "share unenforced"
            )
        for i, s in enumerate(slices):
            envs[f"HGGC_DEVICE_MEMORY_LIMIT_{i}"] = str(s.memory_mib)
        envs["HGGC_DEVICE_SM_LIMIT"] = str(max(s.compute_percent for s in slices))
        envs["HGGC_LEDGER_PATH"] = config.ledger_path
        envs[LOG_ENV] = str(config.log_level)
        mounts.extend(Mount(host_path=p, container_path=p) for p in libraries)
        mounts.append(
            Mount(host_path=f"{config.quota_dir}/{PRELOAD}", container_path=PRELOAD_TARGET)
        )
    return ContainerAllocation(envs=envs, devices=nodes.unique(devices), mounts=tuple(mounts))

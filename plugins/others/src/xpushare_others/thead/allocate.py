"""What a container gets for its PPUs: their nodes, and HGGC's quota for a slice.

Every container gets ``/dev/alixpu`` and ``/dev/alixpu_ctl`` and each PPU's
``/dev/alixpu_ppu<ordinal>`` (gpustack-devices.md §4.5). A slice smaller than the PPU is
enforced by T-Head's HGGC quota shim (§4.5, "sliced"): ``hggc_quota.so`` and
``hgml_dlsym_hook.so`` preloaded through a mounted ``/etc/ld.so.preload``, with
``HGGC_DEVICE_MEMORY_LIMIT_<i>`` (a bare MiB integer, ``i`` the container's own index, in
ascending PPU order), ``HGGC_DEVICE_SM_LIMIT`` (percent, given even at 100: the shim refuses a
card without it), ``HGGC_LEDGER_PATH`` and ``LIBHGGC_LOG_LEVEL`` (unless the pod sets it).

A slice of a PPU in MIG mode (``"<profile>@<start>"``) is a MIG instance cut now, on the
vendor thread (:mod:`.instances`): the container gets the PPU's nodes and the instance's two
capability nodes instead of the quota shim (the hardware enforces it), and
``XPUSHARE_THEAD_MIG_INSTANCES`` (``<profile>@<start>/<gpu instance>/<compute instance>``, for
the container's logs: T-Head has no variable its runtime reads for an instance).
"""

from __future__ import annotations

from typing import Final

from xpushare.models import AllocateRequest, ContainerAllocation, DeviceNode, Mount
from xpushare_others.common import devices as nodes
from xpushare_others.thead import instances, mig
from xpushare_others.thead.config import TheadConfig
from xpushare_others.thead.library import Hgml

#: The shims GPUStack's T-Head injection preloads, and where the preload list goes.
LIBRARIES: Final = ("hggc_quota.so", "hgml_dlsym_hook.so")
PRELOAD: Final = "ld.so.preload"
PRELOAD_TARGET: Final = "/etc/ld.so.preload"
LOG_ENV: Final = "LIBHGGC_LOG_LEVEL"
MIG_ENV: Final = "XPUSHARE_THEAD_MIG_INSTANCES"


def allocate(hgml: Hgml, config: TheadConfig, request: AllocateRequest) -> ContainerAllocation:
    """The container's PPUs: MIG instances cut for the slices of PPUs in MIG mode."""
    by_id = {d.id: d for d in request.devices}
    split = [s for s in request.slices if by_id[s.device_id].mode == mig.MIG_MODE]
    if not split:
        return allocate_shared(config, request)
    who = f"pod {request.pod}, container {request.container!r} on node {request.node}"
    rest = [s for s in request.slices if by_id[s.device_id].mode != mig.MIG_MODE]
    base = allocate_shared(config, request.model_copy(update={"slices": tuple(rest)}))
    ppus = sorted({f"/dev/alixpu_ppu{by_id[s.device_id].index}" for s in split})
    lost = nodes.missing(config, ppus)
    if lost:
        raise RuntimeError(
            f"{who}: the host has no {', '.join(lost)} for its T-Head PPUs; check the PPU "
            "driver (`ppu-smi`) and that the node agent sees the host's /dev (host_root)"
        )
    try:
        caps, names = instances.cut(hgml, config, request, split, who)
    except (mig.MigError, OSError) as exc:
        raise RuntimeError(
            f"{who}: cutting its T-Head MIG instance failed: {exc}. Check `ppu-smi mig -lgi` "
            f"on node {request.node}."
        ) from exc
    absent = nodes.missing(config, caps)
    if absent:
        raise RuntimeError(
            f"{who}: the MIG capability nodes {', '.join(absent)} the driver names are not on "
            "the host; check the PPU driver and that the node agent sees the host's /dev"
        )
    devices = [*base.devices, *nodes.present(config, config.control_nodes)]
    devices.extend(nodes.node(p) for p in [*ppus, *caps])
    envs = {**base.envs, MIG_ENV: ",".join(names)}
    return base.model_copy(update={"envs": envs, "devices": nodes.unique(devices)})


def allocate_shared(config: TheadConfig, request: AllocateRequest) -> ContainerAllocation:
    """Whole PPUs and HGGC quota slices of PPUs not in MIG mode."""
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

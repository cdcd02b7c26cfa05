"""What a container gets for its DCUs: device nodes, the DTK runtime and, when shared, a vDCU.

Every DCU container needs the node-wide KFD nodes (``/dev/kfd``, and ``/dev/mkfd`` where the
driver creates it) and each DCU's DRM nodes; there is no visible-devices variable and no
container toolkit: the nodes given are the DCUs the container sees (HAMi's DCU plugin,
gpustack-devices.md §4.5). A slice smaller than the whole DCU also gets a vDCU config
(:mod:`xpushare_others.hygon.vdev`) and the host's DTK and hyhal runtimes, which enforce it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from xpushare.models import (
    AllocateRequest,
    ContainerAllocation,
    Device,
    DeviceSlice,
    Mount,
    ReleaseRequest,
)
from xpushare_others.common import devices as nodes
from xpushare_others.hygon import vdev
from xpushare_others.hygon.config import HygonConfig

#: The node-wide nodes (HAMi gives them with "rwm").
CONTROL_NODES: Final = ("/dev/kfd", "/dev/mkfd")
#: Where the DTK install appears inside the container (HAMi mounts HYGONPATH there).
CONTAINER_DTK: Final = "/opt/hygondriver"
#: Names the DCUs given (their xpushare ids), for the container's own logs and tools: the
#: device nodes are what makes them visible, Hygon has no visible-devices variable.
DEVICES_ENV: Final = "XPUSHARE_HYGON_DEVICES"


def is_slice(piece: DeviceSlice, device: Device) -> bool:
    """Whether *piece* is less than the whole DCU (so the runtime must confine it).

    An exclusive request with a memory cap is a slice too: HAMi gives it a vDCU with every
    CU and the asked memory.
    """
    return piece.compute_percent < 100 or piece.memory_mib < device.memory_mib


def allocate(config: HygonConfig, request: AllocateRequest) -> ContainerAllocation:
    who = f"pod {request.pod}, container {request.container!r} on node {request.node}"
    by_id = {d.id: d for d in request.devices}
    devices = list(nodes.present(config, CONTROL_NODES, "rwm"))
    if not devices:
        raise RuntimeError(
            f"{who}: /dev/kfd does not exist on the node; load the DCU driver (hydcu) and run "
            "the node agent with the host's /dev mounted"
        )
    for piece in request.slices:
        d = by_id[piece.device_id]
        card, render = d.extra.get("card_minor"), d.extra.get("render_minor")
        if card is None or render is None:
            raise RuntimeError(
                f"{who}: Hygon DCU {d.id} ({d.pci_bus_id}) has no DRM node known to ROCm SMI; "
                "check `ls /sys/bus/pci/devices/<bdf>/drm` and the driver"
            )
        paths = [f"/dev/dri/card{card}", f"/dev/dri/renderD{render}"]
        absent = nodes.missing(config, paths)
        if absent:
            raise RuntimeError(
                f"{who}: Hygon DCU {d.id} device node(s) {', '.join(absent)} do not exist on "
                "the node; the driver or the agent's /dev mount is incomplete"
            )
        devices += [nodes.node(p) for p in paths]
    mounts: list[Mount] = []
    shared = [p for p in request.slices if is_slice(p, by_id[p.device_id])]
    if shared:
        mounts += _slice_mounts(config, request, shared, by_id, who)
    envs = {DEVICES_ENV: ",".join(p.device_id for p in request.slices)}
    return ContainerAllocation(envs=envs, devices=nodes.unique(devices), mounts=tuple(mounts))


def _slice_mounts(
    config: HygonConfig,
    request: AllocateRequest,
    shared: list[DeviceSlice],
    by_id: dict[str, Device],
    who: str,
) -> list[Mount]:
    if len(request.slices) > 1:
        # The runtime reads one config per container (HAMi: "vdev only support one device
        # per container"); the webhook should have refused such a pod.
        raise RuntimeError(
            f"{who}: a container sharing a Hygon DCU may use only that one DCU, it was given "
            f"{len(request.slices)}; ask for whole DCUs (hygon.com/dcucores: 100) or for one"
        )
    piece = shared[0]
    d = by_id[piece.device_id]
    if d.compute_units <= 0 or not d.pci_bus_id:
        raise RuntimeError(
            f"{who}: the compute units of Hygon DCU {d.id} are unknown (KFD topology under "
            f"{config.sysfs_root}/class/kfd not readable), so no vDCU can be made; mount the "
            "host's /sys into the node agent"
        )
    cu_count = max(1, d.compute_units * piece.compute_percent // 100)
    agent_dir = Path(config.vdev_agent_dir or config.vdev_dir)
    name = vdev.dir_name(request.pod.uid, str(request.pod), request.container)
    try:
        vdev.allocate(
            agent_dir,
            name,
            pci_bus_id=d.pci_bus_id,
            total_cus=d.compute_units,
            cu_count=cu_count,
            memory_mib=piece.memory_mib,
            who=who,
        )
    except OSError as exc:
        raise RuntimeError(
            f"{who}: cannot write the vDCU config under {agent_dir}: {exc}; mount the host's "
            f"{config.vdev_dir} writable into the node agent"
        ) from exc
    mounts = [
        Mount(host_path=f"{config.vdev_dir}/{name}", container_path=vdev.CONTAINER_DIR),
        Mount(host_path=config.dtk_path, container_path=CONTAINER_DTK),
    ]
    if config.on_host(config.hyhal_path).exists():
        mounts.append(Mount(host_path=config.hyhal_path, container_path=config.hyhal_path))
    return mounts


def release(config: HygonConfig, request: ReleaseRequest) -> None:
    """Remove the vDCU configs of an ended pod's containers (derived names, repeatable)."""
    agent_dir = Path(config.vdev_agent_dir or config.vdev_dir)
    for container in sorted({c.container for c in request.containers}):
        vdev.release(agent_dir, vdev.dir_name(request.pod.uid, str(request.pod), container))

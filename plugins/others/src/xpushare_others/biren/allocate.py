"""What a container gets for its Biren devices: Biren's device plugin's own answer.

Project-HAMi's biren-device-plugin gives each card its node ``/dev/biren/<card id>`` and
names the cards in ``BR_PHY_CARDS`` (comma-separated), and with ``--mount-dri-device`` adds
``/dev/dri/renderD128`` (option ``dri_device``).
"""

from __future__ import annotations

from typing import Final

from xpushare.models import AllocateRequest, ContainerAllocation, DeviceNode
from xpushare_others.biren.config import BirenConfig
from xpushare_others.common import devices as nodes

#: The render node Biren's plugin mounts (plugin.go drmDevices).
DRI_DEVICE: Final = "/dev/dri/renderD128"


def allocate(config: BirenConfig, request: AllocateRequest) -> ContainerAllocation:
    who = f"pod {request.pod}, container {request.container!r} on node {request.node}"
    ids = [s.device_id for s in request.slices]
    paths = [f"{config.device_dir.rstrip('/')}/{i}" for i in ids]
    lost = nodes.missing(config, paths)
    if lost:
        raise RuntimeError(
            f"{who}: the host has no {', '.join(lost)} for its Biren GPUs; check the Biren "
            "driver (`brsmi`) and that the node agent sees the host's /dev (host_root)"
        )
    devices: list[DeviceNode] = [nodes.node(p) for p in paths]
    if config.dri_device:
        devices.extend(nodes.present(config, [DRI_DEVICE]))
    return ContainerAllocation(
        envs={config.visible_devices_env: ",".join(ids)}, devices=tuple(devices)
    )

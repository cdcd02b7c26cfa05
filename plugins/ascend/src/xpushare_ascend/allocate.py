"""What an Ascend container gets at Allocate: visible devices, device nodes, driver mounts.

Why two shapes. A **whole NPU** is handed over directly: ``/dev/davinci<phy>`` for each
chip, the three control nodes every CANN process opens, the host driver's files read-only,
and ``ASCEND_VISIBLE_DEVICES`` with the physical ids, so the container works with or
without Ascend Docker Runtime. A **vNPU** (a template slice of one chip) cannot be made by
handing out device nodes: the chip must be cut with DCMI when the container starts and
rejoined when it stops, which Ascend Docker Runtime does from ``ASCEND_VISIBLE_DEVICES`` and
``ASCEND_VNPU_SPECS`` (its dynamic vNPU mode). So a vNPU gets those two variables only, and
never the physical chip's node, which would give the container the whole chip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpushare.models import AllocateRequest, ContainerAllocation, Device, DeviceNode, Mount

if TYPE_CHECKING:
    from xpushare_ascend.config import AscendConfig


class AllocationError(RuntimeError):
    """The assignment cannot be served on this node; the message names pod and device."""


def allocate(config: AscendConfig, request: AllocateRequest) -> ContainerAllocation:
    by_id = {d.id: d for d in request.devices}
    slices = sorted(request.slices, key=lambda s: (s.index, s.device_id))
    if not slices:
        raise AllocationError(f"pod {request.pod} container {request.container}: no NPU assigned")
    chips: list[tuple[Device, str]] = []
    for piece in slices:
        device = by_id.get(piece.device_id)
        if device is None or "phy_id" not in device.extra:
            raise AllocationError(
                f"pod {request.pod} container {request.container}: NPU {piece.device_id} is "
                f"not in node {request.node}'s Ascend inventory; it was removed or re-detected "
                "since the pod was bound: delete the pod so it is scheduled again"
            )
        chips.append((device, device.extra["phy_id"]))
    templates = [s.partition for s in slices if s.partition]
    if templates:
        return _vnpu(config, request, chips, templates)
    visible = ",".join(phy for _, phy in chips)
    nodes = [
        DeviceNode(host_path=f"/dev/davinci{phy}", container_path=f"/dev/davinci{phy}")
        for _, phy in chips
    ]
    nodes += [DeviceNode(host_path=p, container_path=p) for p in config.control_devices]
    return ContainerAllocation(
        envs={config.visible_devices_env: visible},
        devices=tuple(nodes),
        mounts=tuple(
            Mount(host_path=p, container_path=p, read_only=True)
            for p in config.driver_mounts
            if config.on_host(p).exists()  # a missing host path would fail the container
        ),
    )


def _vnpu(
    config: AscendConfig,
    request: AllocateRequest,
    chips: list[tuple[Device, str]],
    templates: list[str],
) -> ContainerAllocation:
    if len(chips) != 1 or len(templates) != 1:
        raise AllocationError(
            f"pod {request.pod} container {request.container}: a vNPU is a slice of one NPU, "
            f"but {len(chips)} chips were assigned; ask for whole NPUs to use several"
        )
    device, phy = chips[0]
    template = templates[0]
    offered = [p.name for p in device.partitions]
    if template not in offered:
        raise AllocationError(
            f"pod {request.pod} container {request.container}: NPU {device.id} "
            f"({device.model}) has no vNPU template {template!r}; it offers "
            f"{', '.join(offered) or 'none'}"
        )
    return ContainerAllocation(
        envs={config.visible_devices_env: phy, config.vnpu_specs_env: template}
    )

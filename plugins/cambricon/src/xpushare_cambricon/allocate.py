"""What a Cambricon container gets at Allocate: the card's nodes, and an sMLU for a share.

Why the shapes. A **whole card** is its ``/dev/cambricon_dev<slot>`` node plus the per-card
companion nodes the driver created (IPC, message queues, RPC, ...) and the control node,
exactly what Cambricon's device plugin hands out, with ``CAMBRICON_VISIBLE_DEVICES`` for the
Cambricon container toolkit. A **share** in ``smlu`` mode is an sMLU instance created with
CNDev on the vendor thread, with the container's compute quota and memory as its profile:
the container gets the card node, its IPC node and the instance's
``/dev/cambricon-caps/cap_dev<slot>_mi<id>`` node, named in ``VIRTUAL_DEVICES`` too, and the
driver enforces the quotas for the processes that open it. In ``env`` mode a share is the
card with HAMi's ``CAMBRICON_SPLIT_*`` variables, which the Cambricon split runtime
(``smlu-containerd``) reads.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from xpushare.models import (
    AllocateRequest,
    ContainerAllocation,
    Device,
    DeviceNode,
    Mount,
    ReleaseRequest,
)
from xpushare_cambricon.library import instance_name

if TYPE_CHECKING:
    from xpushare.models import DeviceSlice
    from xpushare_cambricon.config import CambriconConfig
    from xpushare_cambricon.library import Cndev

CARD_NODE: Final = "/dev/cambricon_dev{slot}"
#: Per-card companion nodes, handed out when the driver created them (Cambricon's device
#: plugin does the same): IPC memory, communication, message control, queues and RPC.
CARD_COMPANIONS: Final = (
    "/dev/cambricon_ipcm{slot}",
    "/dev/commu{slot}",
    "/dev/cmsg_ctrl{slot}",
    "/dev/cambr-msgq:{slot}",
    "/dev/cambr-rpc:{slot}",
)
#: Node-wide nodes: the control node CNDev and cnmon open, and GPU-direct RDMA.
CONTROL_NODES: Final = ("/dev/cambricon_ctl", "/dev/cambricon_gdr")
#: The variable naming a container's virtual MLU nodes for the Cambricon container toolkit
#: (GPUStack sets it for Cambricon slices, gpustack-devices.md §4.5).
VIRTUAL_DEVICES: Final = "VIRTUAL_DEVICES"
#: The node HAMi's split runtime opens (its mlu-share plugin hands it out when present).
SPLIT_NODE: Final = "/dev/cambricon-split"
SPLIT_RUNTIME_IN_CONTAINER: Final = "/usr/bin/smlu-containerd"
#: HAMi's mlu-share environment (hami-protocol.md §8; its device plugin's constants).
SPLIT_ENABLE: Final = "CAMBRICON_SPLIT_ENABLE"
SPLIT_VISIBLE: Final = "CAMBRICON_SPLIT_VISIBLE_DEVICES"
SPLIT_MEMS: Final = "CAMBRICON_SPLIT_MEMS"
MIB: Final = 1 << 20
#: Keys of the release record: the sMLU instance's name, its card's CNDev handle and the
#: instance handle its creation returned.
RECORD_NAME: Final = "smlu_instance"
RECORD_CARD: Final = "card_handle"
RECORD_MI: Final = "mi_handle"


class AllocationError(RuntimeError):
    """The assignment cannot be served on this node; the message names pod and card."""


def _node(path: str) -> DeviceNode:
    return DeviceNode(host_path=path, container_path=path)


def _present(config: CambriconConfig, paths: list[str]) -> list[DeviceNode]:
    # A node the host lacks would fail the container's start: hand out only those present.
    return [_node(p) for p in paths if config.on_host(p).exists()]


def allocate(
    config: CambriconConfig, cndev: Cndev, request: AllocateRequest
) -> ContainerAllocation:
    by_id = {d.id: d for d in request.devices}
    slices = sorted(request.slices, key=lambda s: (s.index, s.device_id))
    who = f"pod {request.pod} container {request.container}"
    if not slices:
        raise AllocationError(f"{who}: no MLU assigned")
    cards: list[tuple[DeviceSlice, Device, str]] = []
    for piece in slices:
        device = by_id.get(piece.device_id)
        if device is None or "slot" not in device.extra:
            raise AllocationError(
                f"{who}: MLU {piece.device_id} is not in node {request.node}'s Cambricon "
                "inventory; it was removed or re-detected since the pod was bound: delete the "
                "pod so it is scheduled again"
            )
        cards.append((piece, device, device.extra["slot"]))
    mounts = _mounts(config)
    shared = [c for c in cards if not c[0].exclusive]
    if not shared:
        nodes: list[DeviceNode] = []
        for _, _, slot in cards:
            nodes.append(_node(CARD_NODE.format(slot=slot)))
            nodes += _present(config, [p.format(slot=slot) for p in CARD_COMPANIONS])
        nodes += _present(config, list(CONTROL_NODES))
        return ContainerAllocation(
            envs={config.visible_devices_env: ",".join(slot for _, _, slot in cards)},
            devices=tuple(nodes),
            mounts=tuple(mounts),
        )
    if len(cards) != 1:
        raise AllocationError(
            f"{who}: a share is part of one MLU, but {len(cards)} cards were assigned; ask "
            "for whole MLUs to use several"
        )
    piece, device, slot = shared[0]
    if config.share_mode == "env":
        return _env_split(config, piece, slot, mounts)
    if config.share_mode != "smlu" or device.extra.get("smlu") != "true":
        raise AllocationError(
            f"{who}: MLU {device.id} ({device.model}) cannot be shared here (share_mode "
            f"{config.share_mode!r}, sMLU supported: {device.extra.get('smlu', 'false')}); "
            "ask for a whole MLU"
        )
    name = instance_name(
        request.pod.namespace, request.pod.name, request.pod.uid, request.container
    )
    instance = cndev.instance_for(
        int(device.extra["handle"]), name, max(1, piece.compute_percent), piece.memory_mib * MIB
    )
    card = [_node(CARD_NODE.format(slot=slot))]
    card += _present(config, [f"/dev/cambricon_ipcm{slot}"])
    card.append(_node(instance.dev_node))
    nodes = [*card, *_present(config, [CONTROL_NODES[0]])]
    return ContainerAllocation(
        # The Cambricon container toolkit's variable for sMLU and MIM devices: the card, its
        # IPC node and the instance node, comma-separated (one device's path set).
        envs={VIRTUAL_DEVICES: ",".join(n.host_path for n in card)},
        devices=tuple(nodes),
        mounts=tuple(mounts),
        annotations={"cambricon.xpushare.io/smlu-instance": instance.uuid or instance.name},
        record={
            RECORD_NAME: instance.name,
            RECORD_CARD: device.extra["handle"],
            **({RECORD_MI: str(instance.mi_handle)} if instance.mi_handle is not None else {}),
        },
    )


def release(cndev: Cndev, request: ReleaseRequest) -> None:
    """Destroy the sMLU instances of an ended pod's containers; what is gone is skipped.

    The instance name is derived from the pod and container as at Allocate, so a container
    without a record (the agent stopped meanwhile) is found on every card all the same.
    """
    handles = [cndev.handle(i) for i in range(cndev.count())]
    for container in request.containers:
        name = instance_name(
            request.pod.namespace, request.pod.name, request.pod.uid, container.container
        )
        record = container.record or {}
        mi = record.get(RECORD_MI)
        for handle in handles:
            if cndev.smlu_supported(handle):
                cndev.destroy_instance(handle, name, int(mi) if mi and mi.isdigit() else None)


def _env_split(
    config: CambriconConfig, piece: DeviceSlice, slot: str, mounts: list[Mount]
) -> ContainerAllocation:
    nodes = [_node(CARD_NODE.format(slot=slot))]
    nodes += _present(config, [p.format(slot=slot) for p in CARD_COMPANIONS])
    nodes += _present(config, [*CONTROL_NODES, SPLIT_NODE])
    if config.split_runtime_path and config.on_host(config.split_runtime_path).exists():
        mounts = [
            *mounts,
            Mount(host_path=config.split_runtime_path, container_path=SPLIT_RUNTIME_IN_CONTAINER),
        ]
    return ContainerAllocation(
        envs={
            SPLIT_ENABLE: "1",
            SPLIT_VISIBLE: slot,
            # HAMi writes the memory in GiB (MiB // 1024); rounded up here so that a share
            # below 1 GiB is not written as 0, which would mean "no limit".
            SPLIT_MEMS: str(math.ceil(piece.memory_mib / 1024)),
        },
        devices=tuple(nodes),
        mounts=tuple(mounts),
    )


def _mounts(config: CambriconConfig) -> list[Mount]:
    if config.cnmon_path and config.on_host(config.cnmon_path).exists():
        return [Mount(host_path=config.cnmon_path, container_path=config.cnmon_path)]
    return []

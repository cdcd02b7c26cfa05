"""What a container gets at kubelet's Allocate: the device nodes and variables ROCm needs.

A ROCm container needs no container toolkit, only device nodes (research/gpustack-devices.md
§4.5, as AMD's own device plugin does):

* ``/dev/kfd``: the compute (KFD) interface every ROCm process opens;
* for each granted GPU or partition, ``/dev/dri/renderD<N>`` (its render node) and, where the
  GPU has one, ``/dev/dri/card<N>``.

ROCm's runtime shows a process only the GPUs whose render nodes it can open, so the device
nodes *are* the isolation: inside the container the granted GPUs are devices 0..n-1. The
variables:

* ``ROCR_VISIBLE_DEVICES=0,...,n-1``: the container's own numbering, which overrides a value an
  image may carry that would hide or reorder the granted GPUs (a value in the pod spec's
  ``env`` still wins: kubelet applies it after the device plugin's);
* ``AMD_VISIBLE_DEVICES=none``: tells AMD's container runtime, where a cluster uses it, to add
  no GPUs of its own, so an image's ``all`` cannot widen what was granted (GPUStack sets the
  same, §4.5);
* ``XPUSHARE_AMD_DEVICES``: the granted ids, for people and tools;
* per granted GPU ``i`` (in the order of ``XPUSHARE_AMD_DEVICES``),
  ``XPUSHARE_AMD_MEMORY_LIMIT_<i>`` (MiB) and ``XPUSHARE_AMD_COMPUTE_UNITS_<i>``: the share
  the scheduler booked. No in-container enforcer exists for AMD GPUs in this project, so these
  are advisory (a framework can cap itself with them); use a partition mode (CPX/NPS4) for
  isolation the hardware enforces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpushare.models import ContainerAllocation, DeviceNode
from xpushare_amd.config import VENDOR
from xpushare_amd.fit import granted_units

if TYPE_CHECKING:
    from xpushare.models import AllocateRequest, Device

KFD = "/dev/kfd"
DRI = "/dev/dri"


class AllocationError(RuntimeError):
    """The container cannot be given its GPUs; the message names the pod and the GPU."""


def _minor(device: Device, key: str) -> int | None:
    raw = device.extra.get(key)
    return int(raw) if raw is not None and raw.isdigit() else None


def allocate(request: AllocateRequest) -> ContainerAllocation:
    by_id = {d.id: d for d in request.devices}
    nodes: dict[str, DeviceNode] = {KFD: DeviceNode(host_path=KFD, container_path=KFD)}
    envs: dict[str, str] = {}
    granted: list[str] = []
    for i, piece in enumerate(request.slices):
        device = by_id.get(piece.device_id)
        if device is None or device.vendor != VENDOR:
            raise AllocationError(
                f"vendor {VENDOR!r}: pod {request.pod}, container {request.container!r} was "
                f"assigned GPU {piece.device_id}, which is not in node {request.node}'s AMD "
                "inventory (a stale assignment, or the GPU disappeared): delete the pod so "
                "it is scheduled again"
            )
        render = _minor(device, "render_minor")
        if render is None:
            raise AllocationError(
                f"vendor {VENDOR!r}: pod {request.pod}, container {request.container!r}: GPU "
                f"{device.id} ({device.pci_bus_id}) has no known DRM render node, because "
                "this libamd_smi cannot report it (amdsmi_get_gpu_enumeration_info); upgrade "
                "the node's ROCm to 7.0 or later"
            )
        for path in (f"{DRI}/renderD{render}",) + (
            (f"{DRI}/card{card}",) if (card := _minor(device, "card_minor")) is not None else ()
        ):
            nodes[path] = DeviceNode(host_path=path, container_path=path)
        granted.append(device.id)
        envs[f"XPUSHARE_AMD_MEMORY_LIMIT_{i}"] = str(piece.memory_mib)
        envs[f"XPUSHARE_AMD_COMPUTE_UNITS_{i}"] = str(
            granted_units(piece.compute_percent, device.compute_units)
        )
    envs["XPUSHARE_AMD_DEVICES"] = ",".join(granted)
    envs["ROCR_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(granted)))
    envs["AMD_VISIBLE_DEVICES"] = "none"
    return ContainerAllocation(envs=envs, devices=tuple(nodes.values()))

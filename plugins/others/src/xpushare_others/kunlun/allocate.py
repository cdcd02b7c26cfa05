"""What a container gets for its Kunlun XPUs: the XPUs' device nodes, the control node, and
the XPUs named to Kunlun's runtime.

Kunlun's runtime opens ``/dev/xpu<minor>`` for each XPU and ``/dev/xpuctrl`` for the driver
(Kunlun's own container examples pass exactly these), and Kunlun's container toolkit reads
``XPU_VISIBLE_DEVICES``, the XPUML indices, like NVIDIA's. A vXPU slice is named in
``XPUSHARE_KUNLUN_VXPU_MEMORY_MIB`` (one size per XPU, in the same order).

Not done: cutting the vXPU slice itself. The vXPU runtime that enforces a slice's memory is
Kunlun's (HAMi's vXPU device plugin drives it); its interface is not public, so the slice is
booked by the scheduler and announced to the container, and enforcement rests on that runtime.
"""

from __future__ import annotations

from xpushare.models import AllocateRequest, ContainerAllocation, DeviceNode
from xpushare_others.common import devices as nodes
from xpushare_others.kunlun.config import VXPU_VENDOR, KunlunConfig

#: Names the XPUs given (their xpushare ids), for the container's own logs and tools.
DEVICES_ENV = "XPUSHARE_KUNLUN_DEVICES"
#: The vXPU slice sizes, MiB, one per XPU in the order of the visible devices.
VXPU_MEMORY_ENV = "XPUSHARE_KUNLUN_VXPU_MEMORY_MIB"


def allocate(config: KunlunConfig, vendor: str, request: AllocateRequest) -> ContainerAllocation:
    who = f"pod {request.pod}, container {request.container!r} on node {request.node}"
    by_id = {d.id: d for d in request.devices}
    devices: list[DeviceNode] = nodes.present(config, config.control_nodes)
    if not devices:
        raise RuntimeError(
            f"{who}: the Kunlun control node {', '.join(config.control_nodes)} does not exist "
            "on the node; load the Kunlun driver (kunlun.ko) and run the node agent with the "
            "host's /dev"
        )
    for s in request.slices:
        d = by_id[s.device_id]
        path = f"/dev/xpu{d.extra.get('minor', d.index)}"
        if nodes.missing(config, [path]):
            raise RuntimeError(
                f"{who}: Kunlun XPU {d.id} (index {d.index}) has no device node {path} on the "
                "node; check the driver with `xpu-smi`"
            )
        devices.append(nodes.node(path))
    envs = {
        config.visible_env: ",".join(str(by_id[s.device_id].index) for s in request.slices),
        DEVICES_ENV: ",".join(s.device_id for s in request.slices),
    }
    if vendor == VXPU_VENDOR:
        envs[VXPU_MEMORY_ENV] = ",".join(str(s.memory_mib) for s in request.slices)
    return ContainerAllocation(envs=envs, devices=nodes.unique(devices))

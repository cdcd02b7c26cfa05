"""What a container gets for its MetaX GPUs: device nodes, and its sGPU slices named.

MetaX needs no container toolkit: the container gets the node's MetaX control nodes and each
GPU's DRM nodes (gpustack-devices.md §4.5). A slice in sGPU mode is also named to MetaX's
runtime in ``METAX_SGPUS``, one ``sgpu=<BDF>;compute=<percent>;vram=<MiB>`` entry per GPU,
joined by ``,`` (GPUStack's fields, without the sGPU index and alias that exist only once a
subdevice is created).

The pod's sGPU QoS policy (``metax-tech.com/sgpu-qos-policy``, validated and defaulted by the
webhook) reaches Allocate with the pod's annotations and is handed on with a slice: as the
same key in the container's annotations (kubelet passes them to the container runtime) and
in ``XPUSHARE_METAX_QOS_POLICY``, since no MetaX runtime variable for it is documented.
The pod's app class (``metax-tech.com/sgpu-app-class``) is handed on the same way, in
``XPUSHARE_METAX_APP_CLASS``; an ``online`` slice carries ``compute=0`` (HAMi books no cores
for online pods).

Not done yet: creating the sGPU subdevice itself (``/sys/bus/pci/devices/<BDF>/sgpu/create``)
and destroying it when the pod ends, which needs a pod-lifecycle hook the vendor contract
does not have; until then isolation rests on MetaX's runtime honouring the variable.
"""

from __future__ import annotations

from xpushare.models import AllocateRequest, ContainerAllocation, DeviceNode
from xpushare_others.common import devices as nodes
from xpushare_others.metax.config import MetaxConfig
from xpushare_others.metax.request import APP_CLASS_KEY, QOS_KEY
from xpushare_others.metax.tags import APP_CLASSES, QOS_POLICIES

#: The QoS policy of the pod's slices, for the container's own tools and runtime hooks.
QOS_ENV = "XPUSHARE_METAX_QOS_POLICY"

#: Names the GPUs given (their xpushare ids), for the container's own logs and tools: the
#: device nodes are what makes them visible.
DEVICES_ENV = "XPUSHARE_METAX_DEVICES"

#: The app class (``online``/``offline``) of the pod's slices, for the same readers.
APP_CLASS_ENV = "XPUSHARE_METAX_APP_CLASS"


def allocate(config: MetaxConfig, request: AllocateRequest) -> ContainerAllocation:
    who = f"pod {request.pod}, container {request.container!r} on node {request.node}"
    by_id = {d.id: d for d in request.devices}
    devices: list[DeviceNode] = nodes.present(config, config.control_nodes)
    if not devices:
        raise RuntimeError(
            f"{who}: none of the MetaX control nodes {', '.join(config.control_nodes)} exists "
            "on the node; load the MetaX driver and run the node agent with the host's /dev"
        )
    sgpus = []
    for s in request.slices:
        d = by_id[s.device_id]
        card, render = d.extra.get("card_minor"), d.extra.get("render_minor")
        if card is None or render is None:
            raise RuntimeError(
                f"{who}: MetaX GPU {d.id} ({d.pci_bus_id}) has no DRM node under "
                f"{config.sysfs_root}/bus/pci/devices/{d.pci_bus_id}/drm; mount the host's /sys "
                "into the node agent"
            )
        paths = [f"/dev/dri/card{card}", f"/dev/dri/renderD{render}"]
        absent = nodes.missing(config, paths)
        if absent:
            raise RuntimeError(
                f"{who}: MetaX GPU {d.id} device node(s) {', '.join(absent)} do not exist on "
                "the node"
            )
        devices += [nodes.node(p) for p in paths]
        if config.mode == "sgpu" and (s.compute_percent < 100 or s.memory_mib < d.memory_mib):
            sgpus.append(f"sgpu={d.pci_bus_id};compute={s.compute_percent};vram={s.memory_mib}")
    envs = {DEVICES_ENV: ",".join(s.device_id for s in request.slices)}
    annotations: dict[str, str] = {}
    if sgpus:
        envs[config.sgpus_env] = ",".join(sgpus)
        # Only a policy the webhook would accept is passed on (the annotation is the user's).
        qos = request.pod_annotations.get(QOS_KEY)
        if qos in QOS_POLICIES:
            envs[QOS_ENV] = qos
            annotations[QOS_KEY] = qos
        app = request.pod_annotations.get(APP_CLASS_KEY)
        if app in APP_CLASSES:
            envs[APP_CLASS_ENV] = app
            annotations[APP_CLASS_KEY] = app
    return ContainerAllocation(envs=envs, devices=nodes.unique(devices), annotations=annotations)

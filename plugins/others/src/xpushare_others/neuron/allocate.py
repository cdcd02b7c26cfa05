"""What a container gets for its Neuron share: the devices' nodes and its cores named.

The Neuron runtime opens ``/dev/neuron<N>`` for each device it uses and reads
``NEURON_RT_VISIBLE_CORES``, the node-wide NeuronCore ids (``device * cores + core``) it may
use, as the Neuron device plugin passes them; ``AWS_NEURON_VISIBLE_DEVICES`` names the
devices for Neuron's container hook.
"""

from __future__ import annotations

from xpushare.models import AllocateRequest, ContainerAllocation
from xpushare_others.common import devices as nodes
from xpushare_others.neuron import cores
from xpushare_others.neuron.config import NeuronConfig

VISIBLE_DEVICES_ENV = "AWS_NEURON_VISIBLE_DEVICES"
#: Names the devices given (their xpushare ids), for the container's own logs and tools.
DEVICES_ENV = "XPUSHARE_AWSNEURON_DEVICES"


def allocate(config: NeuronConfig, request: AllocateRequest) -> ContainerAllocation:
    who = f"pod {request.pod}, container {request.container!r} on node {request.node}"
    by_id = {d.id: d for d in request.devices}
    devices = []
    core_ids: list[int] = []
    for s in request.slices:
        d = by_id[s.device_id]
        path = f"/dev/neuron{d.index}"
        if nodes.missing(config, [path]):
            raise RuntimeError(
                f"{who}: Neuron device {d.id} (index {d.index}) has no device node {path} on "
                "the node; check the driver with `neuron-ls`"
            )
        devices.append(nodes.node(path))
        n = d.compute_units or d.share_slots
        mask = cores.mask_of(s.partition)
        core_ids += cores.core_ids(d.index, n, cores.full(n) if mask is None else mask)
    envs = {
        config.visible_cores_env: ",".join(map(str, core_ids)),
        VISIBLE_DEVICES_ENV: ",".join(str(by_id[s.device_id].index) for s in request.slices),
        DEVICES_ENV: ",".join(s.device_id for s in request.slices),
    }
    return ContainerAllocation(envs=envs, devices=nodes.unique(devices))

"""What a container gets for its Enflame GCUs: the GCUs' device nodes, the control node when
the host has one, the GCUs named to Enflame's runtime, and for a DRS partition its instance.

Enflame's runtime opens ``/dev/gcu<N>`` for each GCU and ``/dev/gcuctl`` for the driver
(Enflame's own device plugin passes these), and Enflame's container toolkit reads
``ENFLAME_VISIBLE_DEVICES``, the EFML indices. A DRS partition is cut on the GCU as an
instance of its profile (:mod:`.instances`, with ``drs_cut``) and named as Enflame's device
plugin names it, ``TOPS_VISIBLE_DEVICES=DRS-<instance uuid>``; ``XPUSHARE_ENFLAME_DRS_PROFILE``
(e.g. ``3g.20gb``), ``..._PROFILE_ID`` and ``..._INSTANCE`` say which for the container's logs.
"""

from __future__ import annotations

from xpushare.models import AllocateRequest, ContainerAllocation, Device, DeviceNode, DeviceSlice
from xpushare_others.common import devices as nodes
from xpushare_others.enflame import instances
from xpushare_others.enflame.config import DRS_VENDOR, EnflameConfig
from xpushare_others.enflame.drs import PROFILE_ID_PREFIX

#: Names the GCUs given (their xpushare ids), for the container's own logs and tools.
DEVICES_ENV = "XPUSHARE_ENFLAME_DEVICES"
DRS_PROFILE_ENV = "XPUSHARE_ENFLAME_DRS_PROFILE"
DRS_PROFILE_ID_ENV = "XPUSHARE_ENFLAME_DRS_PROFILE_ID"
DRS_INSTANCE_ENV = "XPUSHARE_ENFLAME_DRS_INSTANCE"
#: What Enflame's runtime reads for the DRS instance a container may use (Enflame's device
#: plugin: ``TOPS_VISIBLE_DEVICES=DRS-<instance uuid>``).
TOPS_VISIBLE_ENV = "TOPS_VISIBLE_DEVICES"


def _profile(who: str, device: Device, piece: DeviceSlice) -> str:
    """The slice's profile; one naming none (written by hand or by another tool) gets the
    smallest of the GCU's profiles that holds its memory."""
    if piece.partition:
        return piece.partition
    fitting = sorted(
        (p for p in device.partitions if p.memory_mib >= piece.memory_mib),
        key=lambda p: (p.memory_mib, p.name),
    )
    if not fitting:
        raise RuntimeError(
            f"{who}: the assignment of Enflame GCU {device.id} names no DRS profile and no "
            f"profile holds its {piece.memory_mib} MiB; delete the pod so it is scheduled again"
        )
    return fitting[0].name


def allocate(config: EnflameConfig, vendor: str, request: AllocateRequest) -> ContainerAllocation:
    who = f"pod {request.pod}, container {request.container!r} on node {request.node}"
    by_id = {d.id: d for d in request.devices}
    devices: list[DeviceNode] = nodes.present(config, config.control_nodes)
    for s in request.slices:
        d = by_id[s.device_id]
        path = f"/dev/gcu{d.extra.get('minor', d.index)}"
        if nodes.missing(config, [path]):
            raise RuntimeError(
                f"{who}: Enflame GCU {d.id} (index {d.index}) has no device node {path} on "
                "the node; check the driver with `efsmi`"
            )
        devices.append(nodes.node(path))
    envs = {
        config.visible_env: ",".join(str(by_id[s.device_id].index) for s in request.slices),
        DEVICES_ENV: ",".join(s.device_id for s in request.slices),
    }
    record: dict[str, str] = {}
    if vendor == DRS_VENDOR:
        profiles = [_profile(who, by_id[s.device_id], s) for s in request.slices]
        ids = [
            by_id[s.device_id].extra.get(f"{PROFILE_ID_PREFIX}{p}", "")
            for s, p in zip(request.slices, profiles, strict=True)
        ]
        envs[DRS_PROFILE_ENV] = ",".join(profiles)
        envs[DRS_PROFILE_ID_ENV] = ",".join(ids)
        if config.drs_cut:
            if len(request.slices) != 1:
                raise RuntimeError(
                    f"{who}: a DRS container gets one partition of one Enflame GCU, its "
                    f"assignment names {len(request.slices)}; delete the pod to reschedule it"
                )
            gcu = by_id[request.slices[0].device_id]
            made = instances.cut(
                config,
                who,
                instances.pod_key(request.pod),
                request.container,
                gcu.index,
                profiles[0],
                ids[0],
            )
            envs[TOPS_VISIBLE_ENV] = f"DRS-{made.uuid}"
            envs[DRS_INSTANCE_ENV] = made.instance
            record = made.record()
    return ContainerAllocation(envs=envs, devices=nodes.unique(devices), record=record)

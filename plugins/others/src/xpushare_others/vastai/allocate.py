"""What a container gets for its Vastai devices: each die's device nodes, and the dies named.

Per die node number N (see :mod:`xpushare_others.vastai.detect`) a container needs
``/dev/vacc<N>`` (the die's AI accelerator), ``/dev/va<N>_ctl`` and ``/dev/va_video<N>`` (its
control and codec nodes) and its DRM render node, plus the card-wide ``/dev/vatools`` and
``/dev/va_sync``: the nodes container platforms give a Vastai die (e.g. Cloudpods' Vastai
manager). Render nodes are numbered from the lowest ``renderD`` a ``va_card`` entry of
``/dev/dri/by-path`` points at. ``VASTAI_VISIBLE_DEVICES`` names the same dies for Vastai's own
container runtime (``--runtime=vastai``), which then needs no device list.
"""

from __future__ import annotations

import itertools
from typing import Final

from xpushare.models import AllocateRequest, ContainerAllocation, DeviceNode
from xpushare_others.common import devices as nodes
from xpushare_others.vastai import detect
from xpushare_others.vastai.config import VastaiConfig

BY_PATH: Final = "/dev/dri/by-path"
RENDER_PREFIX: Final = "renderD"
#: Most entries of /dev/dri/by-path read (two per DRM device; far above any node's count).
MAX_BY_PATH_ENTRIES: Final = 1024


def render_base(config: VastaiConfig) -> int | None:
    """The lowest render minor of a Vastai card (its first die's), None when none is found."""
    base: int | None = None
    try:
        entries = list(itertools.islice(config.on_host(BY_PATH).iterdir(), MAX_BY_PATH_ENTRIES))
    except OSError:
        return None
    for entry in entries:
        if "va_card" not in entry.name or not entry.name.endswith("-render"):
            continue
        try:
            target = entry.readlink().name
        except OSError:
            continue
        digits = target[len(RENDER_PREFIX) :]
        if target.startswith(RENDER_PREFIX) and digits.isdigit() and len(digits) <= 6:
            minor = int(digits)
            base = minor if base is None else min(base, minor)
    return base


def allocate(config: VastaiConfig, request: AllocateRequest) -> ContainerAllocation:
    who = f"pod {request.pod}, container {request.container!r} on node {request.node}"
    by_id = {d.id: d for d in request.devices}
    die_nodes: list[int] = []
    for s in request.slices:
        found = detect.node_numbers(by_id[s.device_id])
        if not found:
            raise RuntimeError(
                f"{who}: Vastai device {s.device_id} has no die node number in the inventory; "
                "restart the node agent so it detects the device again"
            )
        die_nodes.extend(found)
    envs = {config.visible_devices_env: ",".join(str(n) for n in die_nodes)}
    devices: list[DeviceNode] = []
    if config.device_nodes:
        accel = [f"/dev/vacc{n}" for n in die_nodes]
        lost = nodes.missing(config, accel)
        if lost:
            raise RuntimeError(
                f"{who}: the host has no {', '.join(lost)} for its Vastai dies; check the "
                "vastai_pci driver (`vasmi`), or use Vastai's container runtime "
                "(device_nodes: false)"
            )
        base = render_base(config)
        for n in die_nodes:
            devices.append(nodes.node(f"/dev/vacc{n}"))
            side = [f"/dev/va{n}_ctl", f"/dev/va_video{n}"]
            if base is not None:
                side.append(f"/dev/dri/renderD{base + n}")
            devices.extend(nodes.present(config, side))
        devices.extend(nodes.present(config, config.control_nodes))
    return ContainerAllocation(envs=envs, devices=nodes.unique(devices))

"""How the GPUs of one node are connected (NVLink, PCIe), and how good a set of them is.

Why: a job on several GPUs exchanges data between them all the time; NVLink moves it an
order of magnitude faster than PCIe, and a PCIe path through the CPU interconnect is slower
again. So detection records, per pair of GPUs, the NVLinks between them and their closest
common PCIe ancestor, and the scheduler-side code here turns those links into the pair
scores HAMi uses (research/hami-protocol.md §2.3) to prefer well-connected sets.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from xpushare.models import Device, LinkKind, TopologyLink
from xpushare_nvidia.calls import is_lost, normalize_bus_id, optional, text
from xpushare_nvidia.lazy import pynvml

log = logging.getLogger(__name__)

#: NVML's common-ancestor levels (nvmlGpuTopologyLevel_t) as link kinds. Multiple PCIe
#: switches and a single one both map to PCIE_SWITCH: the model has one kind for both.
#: (By name: the bindings are read on first use, not at import, lazy.py.)
_LEVELS: Final[Mapping[str, LinkKind]] = {
    "NVML_TOPOLOGY_INTERNAL": LinkKind.SAME_BOARD,
    "NVML_TOPOLOGY_SINGLE": LinkKind.PCIE_SWITCH,
    "NVML_TOPOLOGY_MULTIPLE": LinkKind.PCIE_SWITCH,
    "NVML_TOPOLOGY_HOSTBRIDGE": LinkKind.PCIE_HOST_BRIDGE,
    "NVML_TOPOLOGY_NODE": LinkKind.SAME_NUMA,
    "NVML_TOPOLOGY_SYSTEM": LinkKind.CROSS_NUMA,
}


@functools.cache
def _level_kinds() -> dict[int, LinkKind]:
    return {int(getattr(pynvml, name)): kind for name, kind in _LEVELS.items()}


#: HAMi's pair points per link (research/hami-protocol.md §2.3); an NVLink counts per link.
POINTS: Final[Mapping[LinkKind, int]] = {
    LinkKind.NVLINK: 100,
    LinkKind.SAME_BOARD: 60,
    LinkKind.PCIE_SWITCH: 50,
    LinkKind.PCIE_HOST_BRIDGE: 30,
    LinkKind.SAME_NUMA: 20,
    LinkKind.CROSS_NUMA: 10,
}

#: Upper bound of NVLink ports probed per GPU. NVML answers "invalid argument" past the
#: last port; 18 is the most any GPU has (H100/H200 SXM, NVML API reference).
MAX_NVLINKS: Final = 18

#: NVLinks at which a pair counts as fully connected for :func:`set_quality` (A100 SXM:
#: 12 links per GPU).
FULL_NVLINKS: Final = 12


@dataclass(frozen=True)
class GpuPort:
    """What topology discovery needs of one GPU."""

    uuid: str
    handle: Any
    bus_id: str  # normalized, see calls.normalize_bus_id


def _nvlink_remotes(gpu: GpuPort) -> list[str]:
    """Bus ids at the far end of the GPU's active NVLinks (one entry per link)."""
    remotes: list[str] = []
    for link in range(MAX_NVLINKS):
        try:
            active = pynvml.nvmlDeviceGetNvLinkState(gpu.handle, link)
        except pynvml.NVMLError as exc:
            if is_lost(exc):
                raise
            break  # not supported, or past the last port
        if not active:
            continue
        pci = optional(
            "nvmlDeviceGetNvLinkRemotePciInfo",
            pynvml.nvmlDeviceGetNvLinkRemotePciInfo,
            gpu.handle,
            link,
        )
        if pci is not None:
            remotes.append(normalize_bus_id(text(pci.busId)))
    return remotes


def discover(gpus: Sequence[GpuPort]) -> dict[str, tuple[TopologyLink, ...]]:
    """Links of every GPU to every other; a GPU lost meanwhile raises (detection handles it)."""
    by_bus = {g.bus_id: g.uuid for g in gpus}
    direct: dict[str, Counter[str]] = {}
    to_switch: dict[str, int] = {}
    for gpu in gpus:
        remotes = _nvlink_remotes(gpu)
        direct[gpu.uuid] = Counter(by_bus[r] for r in remotes if r in by_bus)
        # A link whose far end is no GPU of this node goes to an NVSwitch.
        to_switch[gpu.uuid] = sum(1 for r in remotes if r not in by_bus)
    links: dict[str, list[TopologyLink]] = {g.uuid: [] for g in gpus}
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            count = _nvlinks_between(a.uuid, b.uuid, direct, to_switch)
            level = optional(
                "nvmlDeviceGetTopologyCommonAncestor",
                pynvml.nvmlDeviceGetTopologyCommonAncestor,
                a.handle,
                b.handle,
            )
            pair: list[tuple[str, str, LinkKind, int]] = []
            if count:
                pair += [(a.uuid, b.uuid, LinkKind.NVLINK, count)]
            kind = _level_kinds().get(int(level)) if level is not None else None
            if kind is not None:
                pair += [(a.uuid, b.uuid, kind, 1)]
            for one, other, link_kind, n in pair:
                links[one].append(TopologyLink(peer=other, kind=link_kind, count=n))
                links[other].append(TopologyLink(peer=one, kind=link_kind, count=n))
    return {uuid: tuple(found) for uuid, found in links.items()}


def _nvlinks_between(
    a: str, b: str, direct: Mapping[str, Counter[str]], to_switch: Mapping[str, int]
) -> int:
    ab, ba = direct[a][b], direct[b][a]
    if ab != ba:
        # HAMi scores such a pair 0 and warns; counting the links both ends agree on keeps
        # the pair usable and the warning tells the operator to look at the fabric.
        log.warning(
            "vendor nvidia: GPUs %s and %s report %d and %d NVLinks to each other; "
            "using %d. Check the NVLink fabric (nvidia-smi nvlink --status).",
            a,
            b,
            ab,
            ba,
            min(ab, ba),
        )
    count = min(ab, ba)
    if count == 0 and to_switch[a] and to_switch[b]:
        # Both reach the same NVSwitch fabric: as many links as the weaker side has.
        count = min(to_switch[a], to_switch[b])
    return count


# ---------------------------------------------------------------------------------------
# Scheduler side: pure functions of the inventory
# ---------------------------------------------------------------------------------------


def has_nvlink(devices: Iterable[Device]) -> bool:
    return any(link.kind is LinkKind.NVLINK for d in devices for link in d.links)


#: Pair points per device, by the device object: inventories change rarely while the
#: scheduler asks about the same devices thousands of times a second. Keyed by ``id()``
#: (devices hold dicts, so they are not hashable) and holding the device itself, so a reused
#: id of a collected device is recognized; bounded, cleared when full.
_POINTS_CACHE: dict[int, tuple[Device, dict[str, int]]] = {}
_POINTS_CACHE_MAX: Final = 65536


def device_points(device: Device) -> dict[str, int]:
    """HAMi's pair score from *device* to each linked peer (sum over the pair's links)."""
    hit = _POINTS_CACHE.get(id(device))
    if hit is not None and hit[0] is device:
        return hit[1]
    points: dict[str, int] = {}
    for link in device.links:
        points[link.peer] = points.get(link.peer, 0) + POINTS.get(link.kind, 0) * link.count
    if len(_POINTS_CACHE) >= _POINTS_CACHE_MAX:
        _POINTS_CACHE.clear()
    _POINTS_CACHE[id(device)] = (device, points)
    return points


def pair_points(devices: Iterable[Device]) -> dict[tuple[str, str], int]:
    """Pair scores among *devices* only, both orders."""
    members = list(devices)
    ids = {d.id for d in members}
    return {
        (device.id, peer): value
        for device in members
        for peer, value in device_points(device).items()
        if peer in ids
    }


def set_points(ids: Sequence[str], points: Mapping[tuple[str, str], int]) -> int:
    """Sum of the pair scores within *ids* (each unordered pair once)."""
    return sum(points.get((a, b), 0) for i, a in enumerate(ids) for b in ids[i + 1 :] if a != b)


def _pair_quality(a: Device, b: str) -> float:
    best = 0.0
    for link in a.links:
        if link.peer != b:
            continue
        if link.kind is LinkKind.NVLINK:
            quality = 0.7 + 0.3 * min(link.count, FULL_NVLINKS) / FULL_NVLINKS
        else:
            quality = POINTS.get(link.kind, 0) / 100
        best = max(best, quality)
    return best


def set_quality(devices: Sequence[Device]) -> float | None:
    """How well *devices* are connected, in [0, 1]; ``None`` for fewer than two GPUs.

    The mean over pairs of: 0.7 to 1.0 for NVLink (1.0 from :data:`FULL_NVLINKS` links up),
    else the PCIe level's HAMi points / 100 (0.6 same board ... 0.1 across CPUs), 0 unknown.
    A fixed scale, so nodes compare with each other: an NVLink pair beats any PCIe pair.
    """
    unique = list({d.id: d for d in devices}.values())
    if len(unique) < 2:
        return None
    pairs = [(a, b) for i, a in enumerate(unique) for b in unique[i + 1 :]]
    return sum(_pair_quality(a, b.id) for a, b in pairs) / len(pairs)

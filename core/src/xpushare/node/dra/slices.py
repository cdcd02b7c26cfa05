"""A vendor's devices as resource.k8s.io/v1 ResourceSlices: names, attributes, capacities, taints.

Pure functions from a :class:`~xpushare.node.devices.DeviceView` to the objects the API
server stores, so the publisher (node/dra/publisher.py) only compares and writes, and the
kubelet plugin (node/dra/prepare.py) maps an allocated device name back to the same device.

The shape (research/k8s-apis.md §6.1, §6.4):

* one **driver per vendor**, ``<vendor>.xpushare.io`` (a DNS subdomain we own), so a
  DeviceClass selects one vendor and kubelet calls that vendor's plugin;
* one **pool per node and driver**, named after the node; every slice of the pool carries
  the pool's ``generation`` (raised on every change: the scheduler uses only the slices of
  the highest generation) and ``resourceSliceCount``;
* each device **allows multiple allocations** (KEP 5075, consumable capacity) with three
  capacities: ``memory`` (bytes), ``cores`` (percent of the device's compute, HAMi's
  ``gpucores``) and ``shares`` (the device's share slots, one taken per allocation), each
  with a request policy, so a claim consumes part of a device and at most ``share_slots``
  claims share it;
* unhealthy devices carry a ``NoSchedule`` taint (KEP 5055) rather than vanishing, so a
  claim already allocated keeps its device name.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

from xpushare.models import LinkKind

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xpushare.models import Device
    from xpushare.node.devices import DeviceView

JsonObject = dict[str, Any]

API_VERSION = "resource.k8s.io/v1"

#: The domain of every driver name and of our own attribute names.
DOMAIN = "xpushare.io"

#: Devices per slice: 128 at most, 64 when any device has taints or counters (research/
#: k8s-apis.md §6.1). Taints come and go with health, so 64 always.
DEVICES_PER_SLICE = 64

#: Attributes and capacities of one device together (k8s-apis.md §6.1).
MAX_ATTRIBUTES_AND_CAPACITIES = 32

#: Longest string attribute value, and longest attribute id after the domain.
MAX_STRING_ATTRIBUTE = 64
MAX_ATTRIBUTE_ID = 32

#: The standard attributes (KEP 5055/5491 family, "resource.kubernetes.io/"): kube-scheduler
#: and other drivers' claims can align on them, e.g. a NIC and a GPU of one NUMA node.
NUMA_ATTRIBUTE = "resource.kubernetes.io/numaNode"
PCI_ATTRIBUTE = "resource.kubernetes.io/pciBusID"

#: The taint an unhealthy device carries. NoSchedule: no new allocation, but a running pod
#: keeps its device (NoExecute would evict it, which a health blip must not do).
UNHEALTHY_TAINT = f"{DOMAIN}/unhealthy"

#: Links that make devices one fast-linked island (NVLink, xGMI, HCCS, MLU-Link).
ISLAND_LINKS = frozenset({LinkKind.NVLINK, LinkKind.XGMI, LinkKind.HCCS, LinkKind.MLULINK})

_LABEL_CHARS = re.compile(r"[^a-z0-9-]+")
_ATTRIBUTE_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_TAINT_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


def driver_name(vendor: str) -> str:
    """The DRA driver name of *vendor* (a DNS label already, VendorSpec checks it)."""
    return f"{vendor}.{DOMAIN}"


def device_name(device_id: str) -> str:
    """A DNS label for *device_id*, stable across detections and unique per id.

    The id itself when it is one already (after lower-casing: ``gpu-8f3c...`` for an NVIDIA
    UUID); otherwise a readable prefix and a hash of the exact id, so two ids that differ
    only in dropped characters never share a name.
    """
    lowered = device_id.lower()
    cleaned = _LABEL_CHARS.sub("-", lowered).strip("-")
    if cleaned == lowered and 0 < len(cleaned) <= 63:
        return cleaned
    digest = hashlib.sha256(device_id.encode()).hexdigest()[:10]
    prefix = cleaned[:50].strip("-") or "dev"
    return f"{prefix}-{digest}"


def device_names(devices: Sequence[Device]) -> dict[str, Device]:
    """Device name -> device, for the devices of one view."""
    return {device_name(d.id): d for d in devices}


def slice_name(node: str, vendor: str, index: int) -> str:
    """The name of slice *index* of *vendor*'s pool on *node* (a DNS subdomain)."""
    base = f"{node}-{vendor}-xpushare-{index}"
    if len(base) <= 253:
        return base
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    return f"{node[:200]}-{digest}-{vendor}-xpushare-{index}"


def islands(devices: Sequence[Device]) -> dict[str, int]:
    """Device id -> fast-link island number: the smallest index among linked devices."""
    index = {d.id: d.index for d in devices}
    parent = {d.id: d.id for d in devices}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for d in devices:
        for link in d.links:
            if link.kind in ISLAND_LINKS and link.peer in parent:
                a, b = root(d.id), root(link.peer)
                if a != b:
                    parent[max(a, b, key=index.__getitem__)] = min(a, b, key=index.__getitem__)
    return {d.id: index[root(d.id)] for d in devices}


def _string(value: str) -> JsonObject:
    return {"string": value[:MAX_STRING_ATTRIBUTE]}


def attributes(device: Device, island: int | None) -> JsonObject:
    """The device's attributes: ours unqualified (the driver's domain), standard ones qualified."""
    attrs: JsonObject = {
        "uuid": _string(device.id),
        "index": {"int": device.index},
        "model": _string(device.model),
        "mode": _string(device.mode),
        "memoryMiB": {"int": device.memory_mib},
    }
    if device.compute_units:
        attrs["computeUnits"] = {"int": device.compute_units}
    if device.numa_node is not None:
        attrs[NUMA_ATTRIBUTE] = {"int": device.numa_node}
    if device.pci_bus_id:
        attrs[PCI_ATTRIBUTE] = _string(device.pci_bus_id.lower())
    if island is not None:
        attrs["linkIsland"] = {"int": island}
    room = MAX_ATTRIBUTES_AND_CAPACITIES - len(CAPACITY_NAMES) - len(attrs)
    # Vendor extras (compute capability, driver version, ...), in name order, as far as they
    # fit; a key that is not an attribute id is left out rather than failing the slice.
    for key in sorted(device.extra):
        if room <= 0:
            break
        if _ATTRIBUTE_ID.match(key) and key not in attrs:
            attrs[key] = _string(device.extra[key])
            room -= 1
    return attrs


#: The capacities of every device, as claims name them in ``capacity.requests``.
CAPACITY_NAMES = ("memory", "cores", "shares")


def capacity(device: Device) -> JsonObject:
    """Memory, cores and shares, each with a request policy (KEP 5075).

    ``memory``: a claim that names none takes the whole device (a whole-GPU claim); else any
    multiple of 1 MiB up to the device (HAMi-core limits in MiB). ``cores``: percent of the
    compute; none named means no compute limit (HAMi's ``gpucores`` unset). ``shares``: every
    allocation takes exactly one, so at most ``share_slots`` claims share a device.
    """
    memory = f"{device.memory_mib}Mi"
    return {
        "memory": {
            "value": memory,
            "requestPolicy": {
                "default": memory,
                "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"},
            },
        },
        "cores": {
            "value": "100",
            "requestPolicy": {
                "default": "0",
                "validRange": {"min": "0", "max": "100", "step": "1"},
            },
        },
        "shares": {
            "value": str(device.share_slots),
            "requestPolicy": {"default": "1", "validValues": ["1"]},
        },
    }


def _taints(reason: str | None) -> list[JsonObject]:
    if reason is None:
        return []
    value = _TAINT_VALUE.sub("-", reason).strip("-._")[:63].strip("-._")
    return [{"key": UNHEALTHY_TAINT, "value": value or "unhealthy", "effect": "NoSchedule"}]


def device_entry(device: Device, island: int | None, unhealthy: str | None) -> JsonObject:
    entry: JsonObject = {
        "name": device_name(device.id),
        "attributes": attributes(device, island),
        "capacity": capacity(device),
        "allowMultipleAllocations": True,
    }
    taints = _taints(unhealthy)
    if taints:
        entry["taints"] = taints
    return entry


def pool_devices(view: DeviceView) -> list[JsonObject]:
    """Every device of *view* as a slice entry, in index order (what the pool holds)."""
    island_of = islands(view.devices)
    grouped = {i for i in island_of.values() if list(island_of.values()).count(i) > 1}
    entries = []
    for d in sorted(view.devices, key=lambda d: (d.index, d.id)):
        island = island_of[d.id] if island_of[d.id] in grouped else None
        reason = None if d.healthy else view.unhealthy_reasons.get(d.id) or "unhealthy"
        entries.append(device_entry(d, island, reason))
    return entries


def build_slices(
    *,
    node: str,
    node_uid: str,
    vendor: str,
    devices: Sequence[JsonObject],
    generation: int,
) -> list[JsonObject]:
    """The slices of *vendor*'s pool on *node* at *generation* (at least one, maybe empty).

    Owned by the Node, so the garbage collector removes them with it; labelled with the
    driver so ``kubectl get resourceslices -l`` finds ours.
    """
    chunks = [
        list(devices[i : i + DEVICES_PER_SLICE]) for i in range(0, len(devices), DEVICES_PER_SLICE)
    ]
    chunks = chunks or [[]]
    driver = driver_name(vendor)
    owner = [
        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
    ]
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {
                "name": slice_name(node, vendor, i),
                "labels": {f"{DOMAIN}/driver": driver, f"{DOMAIN}/vendor": vendor},
                "ownerReferences": owner if node_uid else [],
            },
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": len(chunks)},
                "devices": chunk,
            },
        }
        for i, chunk in enumerate(chunks)
    ]

"""The scheduler's figures under HAMi's metric names, for HAMi's Grafana dashboard.

Behind the setting ``metrics.hami_names`` (off by default: the names and units are HAMi's,
not ours). They are HAMi's scheduler metrics with HAMi's labels and values
(research/hami-protocol.md §3.13, ``cmd/scheduler/metrics.go``): per device, the memory
capacity and booking in bytes, the cores (``device_cores`` is the capacity, as there), the
share slots in use; per namespace quota, the booking against each capped resource. The node
agent exports HAMi's vGPU monitor names next to these (``xpushare.node.metrics``).

The same setting also exports the names HAMi's scheduler used before v2.8 (``nodeGPUOverview``,
``vGPUMemoryPercentage``, ``GPUDeviceMemoryLimit``, ...; HAMi's cmd/scheduler/metrics.go at
commit 3c220fcf), with their labels and values, which the Grafana dashboard HAMi's
documentation points to (grafana.com 22043, core/tests/data/hami/) still reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from xpushare.scheduling import UsageLedger
from xpushare.scheduling.quota import QuotaBook

MIB = 1024 * 1024

#: One row per device: (node, device id, index, model, memory capacity MiB, memory booked
#: MiB, compute capacity %, compute booked %, share slots in use).
HamiDeviceRow = tuple[str, str, int, str, int, int, int, int, int]
#: One row per capped resource: (namespace, resource name, cap, booked).
HamiQuotaRow = tuple[str, str, int, int]
#: One row per container and device of a bound pod: (namespace, node, pod, container index,
#: device id, memory MiB, compute %).
HamiContainerRow = tuple[str, str, str, int, str, int, int]


def hami_device_rows(ledger: UsageLedger) -> list[HamiDeviceRow]:
    """The ledger's devices as HAMi's scheduler reports them (cheap; called on the loop)."""
    return [
        (
            name,
            d.id,
            d.index,
            d.model,
            d.memory_cap,
            d.used_memory,
            d.compute_cap,
            d.used_compute,
            d.used_slots,
        )
        for name, state in ledger.nodes.items()
        for table in state.tables.values()
        for d in table.devices
    ]


def hami_container_rows(ledger: UsageLedger, pods: Mapping[str, Any]) -> list[HamiContainerRow]:
    """Each bound pod's containers and their devices (*pods*: the cluster's pod records by
    ledger key, which name them); decisions not yet bound are left out, as in HAMi.

    ``container_index`` is the container's place in the pod's assignment.
    """
    rows: list[HamiContainerRow] = []
    for entry in ledger.entries():
        record = pods.get(entry.key)
        if entry.reserved or entry.assignment is None or record is None:
            continue
        ref = record.ref
        for index, container in enumerate(entry.assignment.containers):
            for s in container.devices:
                rows.append(
                    (
                        ref.namespace,
                        entry.node,
                        ref.name,
                        index,
                        s.device_id,
                        s.memory_mib,
                        s.compute_percent,
                    )
                )
    return rows


def hami_quota_rows(ledger: UsageLedger, quotas: QuotaBook | None) -> list[HamiQuotaRow]:
    """Per namespace and capped resource, the lowest cap and what the namespace books.

    HAMi's quota manager keys a namespace's quota by the resource (``quota_name`` is the
    resource name, e.g. ``nvidia.com/gpumem``) and counts memory in MiB.
    """
    if quotas is None:
        return []
    caps: dict[tuple[str, str], tuple[int, int]] = {}
    for limit in quotas.all_limits():
        resource = limit.key.split(".", 1)[1]
        used = ledger.namespace_usage(limit.namespace).get(limit.vendor, (0, 0))
        booked = used[0] if limit.kind == "memory" else used[1]
        key = (limit.namespace, resource)
        found = caps.get(key)
        if found is None or limit.limit < found[0]:
            caps[key] = (limit.limit, booked)
    return [(ns, resource, cap, booked) for (ns, resource), (cap, booked) in sorted(caps.items())]


@dataclass
class HamiSnapshot:
    devices: list[HamiDeviceRow] = field(default_factory=list)
    quotas: list[HamiQuotaRow] = field(default_factory=list)
    containers: list[HamiContainerRow] = field(default_factory=list)


class HamiCollector(Collector):
    """Yields HAMi's scheduler families from the last snapshot."""

    def __init__(self, snapshot: HamiSnapshot) -> None:
        self._snapshot = snapshot

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["node", "device_uuid", "device_index", "device_type"]
        memory_limit = GaugeMetricFamily(
            "hami_gpu_memory_limit_bytes", "Device memory that may be booked", labels=labels
        )
        core_limit = GaugeMetricFamily(
            "hami_gpu_core_limit_ratio", "Device cores that may be booked", labels=labels
        )
        memory_allocated = GaugeMetricFamily(
            "hami_gpu_memory_allocated_bytes",
            "Device memory booked by pods",
            labels=["node", "device_uuid", "device_index", "device_cores", "device_type"],
        )
        shared = GaugeMetricFamily(
            "hami_gpu_shared_count", "Containers sharing the device", labels=labels
        )
        core_allocated = GaugeMetricFamily(
            "hami_gpu_core_allocated_ratio", "Device cores booked by pods", labels=labels
        )
        overview = GaugeMetricFamily(
            "hami_node_gpu_overview",
            "Device memory booked by pods, with the device's capacities",
            labels=[
                "node",
                "device_uuid",
                "device_index",
                "device_cores",
                "device_memory_limit",
                "device_type",
            ],
        )
        memory_ratio = GaugeMetricFamily(
            "hami_node_gpu_memory_allocated_ratio",
            "Share of the device memory booked (0 to 1)",
            labels=labels,
        )
        for node, uuid, index, model, cap, used, cores, used_cores, slots in self._snapshot.devices:
            key = [node, uuid, str(index), model]
            memory_limit.add_metric(key, float(cap * MIB))
            core_limit.add_metric(key, float(cores))
            memory_allocated.add_metric([node, uuid, str(index), str(cores), model], used * MIB)
            shared.add_metric(key, float(slots))
            core_allocated.add_metric(key, float(used_cores))
            overview.add_metric(
                [node, uuid, str(index), str(cores), str(cap), model], float(used * MIB)
            )
            if cap > 0:
                memory_ratio.add_metric(key, used / cap)
        yield from (memory_limit, core_limit, memory_allocated, shared, core_allocated)
        yield from (overview, memory_ratio)
        quota_used = GaugeMetricFamily(
            "hami_resource_quota_used",
            "What a namespace books of a device resource it has a quota on",
            labels=["namespace", "quota_name", "limit"],
        )
        quota_limit = GaugeMetricFamily(
            "hami_resource_quota_limit",
            "A namespace's quota on a device resource",
            labels=["namespace", "quota_name"],
        )
        for namespace, resource, cap, booked in self._snapshot.quotas:
            quota_used.add_metric([namespace, resource, str(cap)], float(booked))
            quota_limit.add_metric([namespace, resource], float(cap))
        yield quota_used
        yield quota_limit
        clabels = ["namespace", "node", "pod", "container_index", "device_uuid"]
        container_memory = GaugeMetricFamily(
            "hami_vgpu_memory_allocated_bytes",
            "Device memory booked for a container",
            labels=clabels,
        )
        container_cores = GaugeMetricFamily(
            "hami_vgpu_core_allocated_ratio", "Device cores booked for a container", labels=clabels
        )
        for namespace, node, pod, index, uuid, memory, cores in self._snapshot.containers:
            key = [namespace, node, pod, str(index), uuid]
            container_memory.add_metric(key, float(memory * MIB))
            container_cores.add_metric(key, float(cores))
        yield container_memory
        yield container_cores
        yield from _legacy_families(self._snapshot)


def _legacy_families(snapshot: HamiSnapshot) -> Iterator[GaugeMetricFamily]:
    """HAMi's scheduler families before v2.8: camel-case names, ``nodeid``/``deviceuuid``
    labels, the same figures (``nodeGPUOverview``'s ``devicecores`` is the cores booked and
    ``devicememorylimit`` the capacity in MiB, as there)."""
    labels = ["nodeid", "deviceuuid", "deviceidx"]
    memory_limit = GaugeMetricFamily(
        "GPUDeviceMemoryLimit", "Device memory limit for a certain GPU", labels=labels
    )
    core_limit = GaugeMetricFamily(
        "GPUDeviceCoreLimit", "Device core limit for a certain GPU", labels=labels
    )
    memory_allocated = GaugeMetricFamily(
        "GPUDeviceMemoryAllocated",
        "Device memory allocated for a certain GPU",
        labels=[*labels, "devicecores"],
    )
    shared = GaugeMetricFamily(
        "GPUDeviceSharedNum", "Number of containers sharing this GPU", labels=labels
    )
    core_allocated = GaugeMetricFamily(
        "GPUDeviceCoreAllocated", "Device core allocated for a certain GPU", labels=labels
    )
    overview = GaugeMetricFamily(
        "nodeGPUOverview",
        "GPU overview on a certain node",
        labels=[
            *labels,
            "devicecores",
            "sharedcontainers",
            "devicememorylimit",
            "devicetype",
        ],
    )
    memory_ratio = GaugeMetricFamily(
        "nodeGPUMemoryPercentage",
        "GPU memory allocated percentage on a certain GPU (0 to 1)",
        labels=labels,
    )
    capacity: dict[tuple[str, str], int] = {}
    for node, uuid, index, model, cap, used, cores, used_cores, slots in snapshot.devices:
        capacity[(node, uuid)] = cap
        key = [node, uuid, str(index)]
        memory_limit.add_metric(key, float(cap * MIB))
        core_limit.add_metric(key, float(cores))
        memory_allocated.add_metric([*key, str(used_cores)], float(used * MIB))
        shared.add_metric(key, float(slots))
        core_allocated.add_metric(key, float(used_cores))
        overview.add_metric([*key, str(used_cores), str(slots), str(cap), model], float(used * MIB))
        if cap > 0:
            memory_ratio.add_metric(key, used / cap)
    yield from (memory_limit, core_limit, memory_allocated, shared, core_allocated)
    yield from (overview, memory_ratio)
    clabels = ["podnamespace", "nodename", "podname", "containeridx", "deviceuuid"]
    allocated = GaugeMetricFamily(
        "vGPUPodsDeviceAllocated",
        "vGPU allocated from pods",
        labels=[*clabels, "deviceusedcore"],
    )
    memory_share = GaugeMetricFamily(
        "vGPUMemoryPercentage",
        "vGPU memory percentage allocated from a container (0 to 1)",
        labels=clabels,
    )
    core_share = GaugeMetricFamily(
        "vGPUCorePercentage", "vGPU core allocated from a container", labels=clabels
    )
    for namespace, node, pod, index, uuid, memory, cores in snapshot.containers:
        key = [namespace, node, pod, str(index), uuid]
        allocated.add_metric([*key, str(cores)], float(memory * MIB))
        total = capacity.get((node, uuid), 0)
        if total > 0:  # HAMi: only for a device it still knows
            memory_share.add_metric(key, memory / total)
        core_share.add_metric(key, float(cores))
    yield from (allocated, memory_share, core_share)

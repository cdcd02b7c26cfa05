"""Prometheus metrics of the scheduler process, on a registry of its own.

Why a registry per process object: tests start several schedulers in one interpreter, and the
global registry refuses a second metric of the same name. The per-device gauges are not
labelled Gauges (which would keep series of deleted nodes forever) but a collector that
reads a snapshot of the usage ledger taken on the event loop when /metrics is scraped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from xpushare.scheduler.buckets import LATENCY_BUCKETS
from xpushare.scheduler.hami_metrics import HamiCollector, HamiSnapshot
from xpushare.scheduler.looplag import LAG_BUCKETS
from xpushare.scheduling import UsageLedger
from xpushare.scheduling.quota import QuotaBook

#: One row per device: (node, vendor, device, slots used, memory MiB used, memory MiB
#: capacity, compute % used).
DeviceRow = tuple[str, str, str, int, int, int, int]


def ledger_rows(ledger: UsageLedger) -> list[DeviceRow]:
    """The per-device usage of the ledger as plain tuples (cheap; called on the loop)."""
    rows: list[DeviceRow] = []
    for name, state in ledger.nodes.items():
        for vendor, table in state.tables.items():
            for d in table.devices:
                rows.append(
                    (name, vendor, d.id, d.used_slots, d.used_memory, d.memory_cap, d.used_compute)
                )
    return rows


#: One row per namespace and vendor: (namespace, vendor, memory MiB booked, compute % booked).
NamespaceRow = tuple[str, str, int, int]
#: One row per quota cap: (namespace, quota, spec.hard key, cap, booked), in MiB or percent.
QuotaRow = tuple[str, str, str, int, int]


def namespace_rows(ledger: UsageLedger) -> list[NamespaceRow]:
    """What each namespace's pods book, per vendor (cheap; called on the loop)."""
    return [
        (ns, vendor, memory, compute)
        for ns in ledger.namespaces()
        for vendor, (memory, compute) in sorted(ledger.namespace_usage(ns).items())
    ]


def quota_rows(ledger: UsageLedger, quotas: QuotaBook | None) -> list[QuotaRow]:
    """Every device quota cap with what its namespace books against it."""
    if quotas is None:
        return []
    out: list[QuotaRow] = []
    for limit in quotas.all_limits():
        used = ledger.namespace_usage(limit.namespace).get(limit.vendor, (0, 0))
        booked = used[0] if limit.kind == "memory" else used[1]
        out.append((limit.namespace, limit.quota, limit.key, limit.limit, booked))
    return out


@dataclass
class _Snapshot:
    rows: list[DeviceRow] = field(default_factory=list)
    namespaces: list[NamespaceRow] = field(default_factory=list)
    quotas: list[QuotaRow] = field(default_factory=list)


class _DeviceCollector(Collector):
    def __init__(self, snapshot: _Snapshot) -> None:
        self._snapshot = snapshot

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["node", "vendor", "device"]
        memory = GaugeMetricFamily(
            "xpushare_scheduler_device_memory_allocated_mib",
            "Device memory booked by pods (MiB), per node and device",
            labels=labels,
        )
        capacity = GaugeMetricFamily(
            "xpushare_scheduler_device_memory_capacity_mib",
            "Device memory that may be booked (MiB, after over-commit)",
            labels=labels,
        )
        compute = GaugeMetricFamily(
            "xpushare_scheduler_device_compute_allocated_percent",
            "Device compute booked by pods (percent), per node and device",
            labels=labels,
        )
        slots = GaugeMetricFamily(
            "xpushare_scheduler_device_shares_used",
            "Share slots of the device taken by containers",
            labels=labels,
        )
        for node, vendor, device, used_slots, used_mem, cap, used_compute in self._snapshot.rows:
            key = [node, vendor, device]
            memory.add_metric(key, used_mem)
            capacity.add_metric(key, cap)
            compute.add_metric(key, used_compute)
            slots.add_metric(key, used_slots)
        yield memory
        yield capacity
        yield compute
        yield slots
        ns_memory = GaugeMetricFamily(
            "xpushare_scheduler_namespace_memory_allocated_mib",
            "Device memory booked by the pods of a namespace (MiB), per vendor",
            labels=["namespace", "vendor"],
        )
        ns_compute = GaugeMetricFamily(
            "xpushare_scheduler_namespace_compute_allocated_percent",
            "Device compute booked by the pods of a namespace (percent of a device, summed), "
            "per vendor",
            labels=["namespace", "vendor"],
        )
        for namespace, vendor, booked_memory, booked_compute in self._snapshot.namespaces:
            ns_memory.add_metric([namespace, vendor], booked_memory)
            ns_compute.add_metric([namespace, vendor], booked_compute)
        yield ns_memory
        yield ns_compute
        quota_limit = GaugeMetricFamily(
            "xpushare_scheduler_quota_limit",
            "A ResourceQuota's cap on device memory (MiB) or compute (percent)",
            labels=["namespace", "quota", "resource"],
        )
        quota_used = GaugeMetricFamily(
            "xpushare_scheduler_quota_used",
            "What the namespace books against a ResourceQuota's cap (MiB or percent)",
            labels=["namespace", "quota", "resource"],
        )
        for namespace, quota, hard_key, limit, booked in self._snapshot.quotas:
            quota_limit.add_metric([namespace, quota, hard_key], limit)
            quota_used.add_metric([namespace, quota, hard_key], booked)
        yield quota_limit
        yield quota_used


class SchedulerMetrics:
    """Every metric the scheduler exports (with *hami_names*, HAMi's scheduler metrics too:
    :mod:`xpushare.scheduler.hami_metrics`)."""

    def __init__(self, *, hami_names: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.request_seconds = Histogram(
            "xpushare_scheduler_request_duration_seconds",
            "Server-side time of extender and webhook requests, per verb",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "xpushare_scheduler_decisions_total",
            "Decisions taken, per verb and result",
            ["verb", "result"],
            registry=r,
        )
        self.failures = Counter(
            "xpushare_scheduler_failures_total",
            "Failed requests and rejected nodes, per verb and reason",
            ["verb", "reason"],
            registry=r,
        )
        self.shortlists = Counter(
            "xpushare_scheduler_filter_shortlists_total",
            "/filter answers where more nodes fit than extender.shortlist, by result: "
            "shortened to the policy's best, or every node passed on for a pod that states "
            "soft preferences",
            ["result"],
            registry=r,
        )
        self.annotation_errors = Counter(
            "xpushare_scheduler_annotation_errors_total",
            "Malformed annotations seen (reported and ignored), per object kind and key",
            ["kind", "key"],
            registry=r,
        )
        self.handoff_wait_seconds = Histogram(
            "xpushare_scheduler_handoff_wait_seconds",
            "Time /bind waited for the node's previous handoff",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.handoff_repairs = Counter(
            "xpushare_scheduler_handoff_repairs_total",
            "Stale handoffs cleared, per cause",
            ["cause"],
            registry=r,
        )
        self.takeover_reads = Counter(
            "xpushare_scheduler_takeover_reads_total",
            "A node's pods counted after a term's first handoff write there, by source: the "
            "pod watch once it passed that write, or a list from the API server",
            ["source"],
            registry=r,
        )
        self.model_refresh_failures = Counter(
            "xpushare_scheduler_model_refresh_failures_total",
            "Failures to refresh a model the placement policy learns (the workload), per "
            "policy; the policy keeps its current model and retries later",
            ["policy"],
            registry=r,
        )
        self.watch_errors = Counter(
            "xpushare_scheduler_watch_errors_total",
            "List or watch failures, per resource",
            ["resource"],
            registry=r,
        )
        self.watch_expired = Counter(
            "xpushare_scheduler_watch_expired_total",
            "Watches the API server ended with 410 Gone (the version they resumed from was "
            "compacted away), per resource: each is followed by a relist",
            ["resource"],
            registry=r,
        )
        self.assignment_tampering = Counter(
            "xpushare_scheduler_assignment_tampering_total",
            "Edits of a bound pod's allocation record that were ignored (the first value "
            "holds), per edit: changed, removed, or added after the pod was bound",
            ["edit"],
            registry=r,
        )
        self.informer_healthy = Gauge(
            "xpushare_scheduler_informer_healthy",
            "1 while the resource's list and watch work (0 after failing for "
            "kube.watch_stale_s: readiness is false then)",
            ["resource"],
            registry=r,
        )
        self.leader = Gauge(
            "xpushare_scheduler_leader", "1 while this replica holds the lease", registry=r
        )
        self.synced = Gauge(
            "xpushare_scheduler_cache_synced", "1 once nodes and pods are listed", registry=r
        )
        self.reservations = Gauge(
            "xpushare_scheduler_reservations",
            "Decisions taken and not yet bound (in memory)",
            registry=r,
        )
        self.reservations_uncertain = Gauge(
            "xpushare_scheduler_reservations_uncertain",
            "Reservations kept because their Binding got no answer, until the pod is read back",
            registry=r,
        )
        self.reservations_settled = Counter(
            "xpushare_scheduler_uncertain_binds_settled_total",
            "Binds of unknown outcome resolved by reading the pod back",
            registry=r,
        )
        self.filter_workers = Gauge(
            "xpushare_scheduler_filter_workers",
            "Filter worker processes running and following the reservation stream",
            registry=r,
        )
        self.filter_worker_restarts = Counter(
            "xpushare_scheduler_filter_worker_restarts_total",
            "Filter workers that exited or were killed as stalled, and were started again",
            registry=r,
        )
        self.connections = Gauge(
            "xpushare_scheduler_connections",
            "Open HTTP connections, per listener (main, metrics)",
            ["listener"],
            registry=r,
        )
        self.connections_closed = Counter(
            "xpushare_scheduler_connections_closed_total",
            "Connections the server closed or refused, per listener and reason "
            "(header-timeout, idle-timeout, close-timeout, over-capacity)",
            ["listener", "reason"],
            registry=r,
        )
        self.loop_lag = Histogram(
            "xpushare_scheduler_loop_lag_seconds",
            "How late the event loop ran a timer due every 20 ms: how long a request "
            "arriving then waited for the loop (scheduler/looplag.py)",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self._snapshot = _Snapshot()
        r.register(_DeviceCollector(self._snapshot))
        self.hami: HamiSnapshot | None = None
        if hami_names:
            self.hami = HamiSnapshot()
            r.register(HamiCollector(self.hami))

    def render(
        self,
        rows: list[DeviceRow],
        namespaces: list[NamespaceRow] | None = None,
        quotas: list[QuotaRow] | None = None,
        hami: HamiSnapshot | None = None,
    ) -> bytes:
        """The exposition text with *rows* as the device gauges, *namespaces* and *quotas*
        as the namespace and quota gauges, *hami* as HAMi's (may run off the loop)."""
        self._snapshot.rows = rows
        self._snapshot.namespaces = namespaces or []
        self._snapshot.quotas = quotas or []
        if self.hami is not None and hami is not None:
            self.hami.devices, self.hami.quotas = hami.devices, hami.quotas
            self.hami.containers = hami.containers
        return generate_latest(self.registry)

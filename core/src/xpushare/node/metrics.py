"""Prometheus metrics of the node agent, served from memory only.

Why a custom collector: device figures come from the vendor ``monitor`` hook, which runs on
the vendor's library thread every ``monitor_interval_s`` and leaves a snapshot
(:class:`MonitorStore`). A scrape turns the latest snapshots and device views into metric
families and never calls a vendor library or waits on one (a hung driver cannot hang
``/metrics``). A device that went away is simply not yielded any more, so no label set is
left behind, which a labelled ``Gauge`` would need explicit removals for.

Rules (GPUStack's, research/gpustack-devices.md §8): a figure the vendor could not measure is
absent, not zero; nothing is clamped; a snapshot older than three monitor periods is dropped.

The agent's own behaviour (Allocate latency, registrations) uses ordinary instruments on the
agent's private registry: one agent per registry, so tests can run many agents side by side.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from prometheus_client.metrics_core import Metric

    from xpushare.models import MonitorSnapshot
    from xpushare.node.deviceplugin import PluginStatus
    from xpushare.node.devices import VendorDevices

MIB = 1024 * 1024

#: Allocate latency buckets, seconds: dense around the 50 ms p99 target (DESIGN.md §9) and
#: up to the 8 s deadline.
ALLOCATE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 8.0)

#: A snapshot older than this many monitor periods is not served (GPUStack's rule).
STALE_PERIODS = 3

_VENDOR_STATES = ("starting", "inactive", "ok", "no-devices", "error")


@dataclass(frozen=True)
class _Sample:
    snapshot: MonitorSnapshot
    taken: float


class MonitorStore:
    """The latest monitor snapshot of each vendor, replaced whole by the monitor loop."""

    def __init__(self, max_age_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self._clock = clock
        self._samples: dict[str, _Sample] = {}
        self.last_success: dict[str, float] = {}

    def put(self, vendor: str, snapshot: MonitorSnapshot | None) -> None:
        if snapshot is None:
            self._samples.pop(vendor, None)
            return
        self._samples[vendor] = _Sample(snapshot, self._clock())
        self.last_success[vendor] = time.time()

    def get(self, vendor: str) -> MonitorSnapshot | None:
        sample = self._samples.get(vendor)
        if sample is None or self._clock() - sample.taken > self.max_age_s:
            return None
        return sample.snapshot


class AgentMetrics:
    """The agent's registry: its instruments and the collector of device figures."""

    def __init__(
        self,
        *,
        node: str,
        vendors: Mapping[str, VendorDevices],
        monitor: MonitorStore,
        plugins: Callable[[], list[PluginStatus]],
        hami_names: bool = False,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.allocate_seconds = Histogram(
            "xpushare_allocate_duration_seconds",
            "Time to answer kubelet's Allocate and GetPreferredAllocation calls.",
            ["vendor", "call", "outcome"],
            buckets=ALLOCATE_BUCKETS,
            registry=self.registry,
        )
        self.hook_errors = Counter(
            "xpushare_vendor_hook_errors",
            "Failed calls of a vendor's node-side hook (detect, monitor, health).",
            ["vendor", "hook"],
            registry=self.registry,
        )
        self.api_errors = Counter(
            "xpushare_node_api_errors",
            "Failed Kubernetes API calls of the node agent (inventory, labels, handoff).",
            registry=self.registry,
        )
        self.registry.register(
            DeviceCollector(
                node=node,
                vendors=vendors,
                monitor=monitor,
                plugins=plugins,
                hami_names=hami_names,
            )
        )


class DeviceCollector:
    """Yields device, container and plugin metric families from in-memory state only.

    With *hami_names*, also HAMi's vGPU monitor families (``cmd/vGPUmonitor/metrics.go``),
    with HAMi's labels and values (its utilization "ratios" are percents), so HAMi's
    Grafana dashboard reads this agent as it read HAMi's monitor; and the names the monitor
    used before HAMi v2.8 (``HostGPUMemoryUsage``, ``vGPU_device_memory_usage_in_bytes``, ...,
    at HAMi's commit 3c220fcf), which the dashboard HAMi's documentation points to
    (grafana.com 22043) reads. Those carry a ``node_name`` label: HAMi's ServiceMonitor
    added it from the pod's node, ours keeps the agent's own labels.
    """

    def __init__(
        self,
        *,
        node: str,
        vendors: Mapping[str, VendorDevices],
        monitor: MonitorStore,
        plugins: Callable[[], list[PluginStatus]],
        hami_names: bool = False,
    ) -> None:
        self.node = node
        self._vendors = vendors
        self._monitor = monitor
        self._plugins = plugins
        self.hami_names = hami_names

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        labels = ["node", "vendor", "device", "index"]
        info = GaugeMetricFamily(
            "xpushare_device_info",
            "A device of the node (always 1), with its model.",
            labels=[*labels, "model"],
        )
        healthy = GaugeMetricFamily(
            "xpushare_device_healthy", "1 if the device is healthy, else 0.", labels=labels
        )
        slots = GaugeMetricFamily(
            "xpushare_device_share_slots",
            "How many containers may share the device.",
            labels=labels,
        )
        util = GaugeMetricFamily(
            "xpushare_device_utilization_ratio", "Compute utilization, 0 to 1.", labels=labels
        )
        mem_used = GaugeMetricFamily(
            "xpushare_device_memory_used_bytes", "Device memory in use.", labels=labels
        )
        mem_total = GaugeMetricFamily(
            "xpushare_device_memory_total_bytes", "Device memory.", labels=labels
        )
        temp = GaugeMetricFamily(
            "xpushare_device_temperature_celsius", "Device temperature.", labels=labels
        )
        power = GaugeMetricFamily("xpushare_device_power_watts", "Power draw.", labels=labels)
        procs = GaugeMetricFamily(
            "xpushare_device_processes", "Processes using the device.", labels=labels
        )
        clabels = ["node", "vendor", "device", "namespace", "pod", "container"]
        c_used = GaugeMetricFamily(
            "xpushare_container_memory_used_bytes",
            "Device memory a container uses, where the vendor can tell.",
            labels=clabels,
        )
        c_limit = GaugeMetricFamily(
            "xpushare_container_memory_limit_bytes",
            "Device memory limit of a container.",
            labels=clabels,
        )
        c_util = GaugeMetricFamily(
            "xpushare_container_utilization_ratio",
            "A container's compute utilization of a device, 0 to 1 (may pass 1 when bursting).",
            labels=clabels,
        )
        state = GaugeMetricFamily(
            "xpushare_vendor_state",
            "1 for the vendor's current state on this node (inactive: library or hardware "
            "absent; error: detection failed).",
            labels=["node", "vendor", "state"],
        )
        last = GaugeMetricFamily(
            "xpushare_monitor_last_success_timestamp_seconds",
            "When the vendor's monitor last returned a sample.",
            labels=["node", "vendor"],
        )
        for vendor, devices in sorted(self._vendors.items()):
            view = devices.view
            for name in _VENDOR_STATES:
                state.add_metric([self.node, vendor, name], 1.0 if view.state == name else 0.0)
            index: dict[str, str] = {}
            for d in view.devices:
                values = [self.node, vendor, d.id, str(d.index)]
                index[d.id] = str(d.index)
                info.add_metric([*values, d.model], 1.0)
                healthy.add_metric(values, 1.0 if d.healthy else 0.0)
                slots.add_metric(values, float(d.share_slots))
            if vendor in self._monitor.last_success:
                last.add_metric([self.node, vendor], self._monitor.last_success[vendor])
            snapshot = self._monitor.get(vendor)
            if snapshot is None:
                continue
            for s in snapshot.devices:
                if s.device_id not in index:
                    continue  # a device no longer in the inventory: no label set left behind
                values = [self.node, vendor, s.device_id, index[s.device_id]]
                if s.utilization_percent is not None:
                    util.add_metric(values, s.utilization_percent / 100.0)
                if s.memory_used_mib is not None:
                    mem_used.add_metric(values, float(s.memory_used_mib * MIB))
                if s.memory_total_mib is not None:
                    mem_total.add_metric(values, float(s.memory_total_mib * MIB))
                if s.temperature_c is not None:
                    temp.add_metric(values, s.temperature_c)
                if s.power_w is not None:
                    power.add_metric(values, s.power_w)
                if s.process_count is not None:
                    procs.add_metric(values, float(s.process_count))
            for c in snapshot.containers:
                if c.device_id not in index:
                    continue
                values = [self.node, vendor, c.device_id, c.namespace, c.pod, c.container]
                c_used.add_metric(values, float(c.memory_used_mib * MIB))
                if c.memory_limit_mib is not None:
                    c_limit.add_metric(values, float(c.memory_limit_mib * MIB))
                if c.utilization_percent is not None:
                    c_util.add_metric(values, c.utilization_percent / 100.0)
        yield from (info, healthy, slots, util, mem_used, mem_total, temp, power, procs)
        yield from (c_used, c_limit, c_util, state, last)
        yield from self._plugin_families()
        if self.hami_names:
            yield from self._hami_families()

    def _hami_families(self) -> Iterator[Metric]:
        dlabels = ["node", "device_index", "device_uuid", "device_type"]
        host_memory = GaugeMetricFamily(
            "hami_host_gpu_memory_used_bytes", "Device memory in use", labels=dlabels
        )
        host_util = GaugeMetricFamily(
            "hami_host_gpu_utilization_ratio", "Device utilization (percent)", labels=dlabels
        )
        clabels = ["namespace", "pod", "container", "vdevice_index", "device_uuid"]
        vgpu_used = GaugeMetricFamily(
            "hami_vgpu_memory_used_bytes", "Device memory a container uses", labels=clabels
        )
        vgpu_limit = GaugeMetricFamily(
            "hami_vgpu_memory_limit_bytes", "Device memory limit of a container", labels=clabels
        )
        vgpu_util = GaugeMetricFamily(
            "hami_container_device_utilization_ratio",
            "A container's utilization of a device (percent)",
            labels=clabels,
        )
        old_dlabels = ["deviceidx", "deviceuuid", "node_name"]
        old_host_memory = GaugeMetricFamily(
            "HostGPUMemoryUsage", "GPU device memory usage", labels=old_dlabels
        )
        old_host_util = GaugeMetricFamily(
            "HostCoreUtilization", "GPU core utilization", labels=old_dlabels
        )
        old_clabels = ["podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "node_name"]
        old_used = GaugeMetricFamily(
            "vGPU_device_memory_usage_in_bytes", "vGPU device usage", labels=old_clabels
        )
        old_limit = GaugeMetricFamily(
            "vGPU_device_memory_limit_in_bytes", "vGPU device limit", labels=old_clabels
        )
        # HAMi's also carries HAMi-core's context/module/buffer breakdown as labels, which
        # the vendors' monitors do not report: the total only.
        old_desc = GaugeMetricFamily(
            "Device_memory_desc_of_container",
            "Container device memory description",
            labels=old_clabels,
        )
        old_util = GaugeMetricFamily(
            "Device_utilization_desc_of_container",
            "Container device utilization description",
            labels=old_clabels,
        )
        for vendor, devices in sorted(self._vendors.items()):
            known = {d.id: d for d in devices.view.devices}
            snapshot = self._monitor.get(vendor)
            if snapshot is None:
                continue
            for s in snapshot.devices:
                d = known.get(s.device_id)
                if d is None:
                    continue
                values = [self.node, str(d.index), d.id, d.model]
                old = [str(d.index), d.id, self.node]
                if s.memory_used_mib is not None:
                    host_memory.add_metric(values, float(s.memory_used_mib * MIB))
                    old_host_memory.add_metric(old, float(s.memory_used_mib * MIB))
                if s.utilization_percent is not None:
                    host_util.add_metric(values, float(s.utilization_percent))
                    old_host_util.add_metric(old, float(s.utilization_percent))
            # HAMi's vdevice_index: the device's place among the container's own devices.
            places: dict[tuple[str, str, str], list[str]] = {}
            for c in sorted(
                snapshot.containers,
                key=lambda c: known[c.device_id].index if c.device_id in known else 0,
            ):
                if c.device_id not in known:
                    continue
                owner = (c.namespace, c.pod, c.container)
                seen = places.setdefault(owner, [])
                if c.device_id not in seen:
                    seen.append(c.device_id)
                values = [*owner, str(seen.index(c.device_id)), c.device_id]
                old = [*values, self.node]
                vgpu_used.add_metric(values, float(c.memory_used_mib * MIB))
                old_used.add_metric(old, float(c.memory_used_mib * MIB))
                old_desc.add_metric(old, float(c.memory_used_mib * MIB))
                if c.memory_limit_mib is not None:
                    vgpu_limit.add_metric(values, float(c.memory_limit_mib * MIB))
                    old_limit.add_metric(old, float(c.memory_limit_mib * MIB))
                if c.utilization_percent is not None:
                    vgpu_util.add_metric(values, float(c.utilization_percent))
                    old_util.add_metric(old, float(c.utilization_percent))
        yield from (host_memory, host_util, vgpu_used, vgpu_limit, vgpu_util)
        yield from (old_host_memory, old_host_util, old_used, old_limit, old_desc, old_util)

    def _plugin_families(self) -> Iterator[Metric]:
        labels = ["node", "vendor", "resource"]
        registered = GaugeMetricFamily(
            "xpushare_device_plugin_registered",
            "1 while the device plugin's current generation is registered with kubelet.",
            labels=labels,
        )
        generation = GaugeMetricFamily(
            "xpushare_device_plugin_generation",
            "Generation of the device plugin's server (goes up after each kubelet restart).",
            labels=labels,
        )
        registrations = GaugeMetricFamily(
            "xpushare_device_plugin_registrations",
            "Registrations kubelet accepted since the agent started.",
            labels=labels,
        )
        for p in self._plugins():
            values = [self.node, p.vendor, p.resource]
            registered.add_metric(values, 1.0 if p.registered else 0.0)
            generation.add_metric(values, float(p.generation))
            registrations.add_metric(values, float(p.registrations))
        yield from (registered, generation, registrations)

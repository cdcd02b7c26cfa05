"""The node agent: one process per node that detects, publishes, serves kubelet and monitors.

Why this shape: every part is a task of one :class:`~xpushare.node.tasks.TaskGroup`, so a
part that dies takes the process with it (the DaemonSet restarts the pod) instead of
leaving, say, a device plugin without health updates behind a passing liveness probe. Per
loaded vendor:

* **start**: ``startup`` on the vendor's library thread; a missing library makes the vendor
  *inactive* (with the reason, in metrics and ``/readyz``), any other failure is retried
  every ``detect_interval_s``;
* **detect** at start, every ``detect_interval_s``, and at once when asked to rescan (SIGHUP,
  a device id the inventory lacks in a health event or a monitor sample, the partition lock
  file going away); "no devices" and "could not detect" are different states;
* **health**: vendor events mark devices unhealthy, or healthy again; while the library
  thread is stuck every device is unhealthy;
* **monitor**: samples into a snapshot the metrics endpoint serves;
* **device plugin**: one gRPC server registered with kubelet, in generations; or, in DRA
  mode (``config.mode == "dra"``, docs/dra.md), the vendor's ResourceSlices
  (node/dra/publisher.py) and its kubelet DRA plugin (node/dra/plugin.py) instead.

And once per node: the release tracker (frees what an ended pod's vendors created,
node/release.py), the inventory publisher (annotations, labels) and the HTTP
endpoints (``/metrics``, ``/healthz``, ``/readyz``) on the same event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from xpushare.errors import PluginError, VendorUnavailable
from xpushare.native import LibraryThreadStuck, NativeCallTimeout, NativeError
from xpushare.node.allocate import Allocator
from xpushare.node.deviceplugin import DevicePluginService, PluginServer, PluginStatus
from xpushare.node.devices import VendorDevices
from xpushare.node.dirwatch import DirectoryWatch
from xpushare.node.dra.checkpoint import Checkpoints
from xpushare.node.dra.plugin import DraPluginServer
from xpushare.node.dra.prepare import ClaimPreparer
from xpushare.node.dra.publisher import SlicePublisher, remove_foreign_slices
from xpushare.node.heap import release_free_heap
from xpushare.node.http import serve_http
from xpushare.node.inventory import InventoryPublisher
from xpushare.node.kube import KubeError
from xpushare.node.ledger import ReleaseLedger
from xpushare.node.metrics import STALE_PERIODS, AgentMetrics, MonitorStore
from xpushare.node.podresources import PodResources
from xpushare.node.release import ReleaseTracker
from xpushare.node.tasks import TaskGroup

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.node.config import NodeConfig
    from xpushare.node.dra.prepare import ClaimKube
    from xpushare.node.dra.publisher import SliceKube
    from xpushare.node.kube import NodeKube
    from xpushare.plugins import PluginHost

log = logging.getLogger(__name__)

#: How often the partition lock file is looked at; a MIG change takes seconds to apply.
PARTITION_LOCK_POLL_S = 1.0
#: How often readiness is looked at before the start-up heap is given back: the agent is
#: ready within seconds of kubelet answering, and nothing waits on this.
_READY_POLL_S = 1.0


class NodeAgent:
    """One node's agent; :meth:`run` until :meth:`stop` or a part fails."""

    def __init__(
        self,
        config: NodeConfig,
        host: PluginHost,
        kube: NodeKube,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.host = host
        self.kube = kube
        self.node = config.node_name
        self.devices = {name: VendorDevices(name) for name in host.vendors}
        self.monitor = MonitorStore(max_age_s=STALE_PERIODS * config.monitor_interval_s)
        self.plugins: dict[str, PluginServer] = {}
        #: DRA mode: each vendor's kubelet plugin and ResourceSlice publisher.
        self.dra_plugins: dict[str, DraPluginServer] = {}
        self.slices: dict[str, SlicePublisher] = {}
        if config.mode == "dra" and not hasattr(kube, "list_resource_slices"):
            raise ValueError("DRA mode needs a Kubernetes client with resource.k8s.io/v1 calls")
        self.metrics = AgentMetrics(
            node=self.node,
            vendors=self.devices,
            monitor=self.monitor,
            plugins=self.plugin_statuses,
            hami_names=config.hami_metrics,
        )
        self.ledger = ReleaseLedger(config.ledger_dir)
        socket = config.pod_resources_socket
        self.releases = ReleaseTracker(
            kube=kube,
            ledger=self.ledger,
            vendors=host.vendors,
            config=config,
            pod_resources=PodResources(socket, timeout_s=config.api_timeout_s) if socket else None,
            ready=lambda vendor: vendor in self._started,
            on_error=lambda vendor: self.metrics.hook_errors.labels(vendor, "release").inc(),
        )
        self.allocator = Allocator(
            kube=kube,
            vendors=host.vendors,
            devices=self.devices,
            deadline_s=config.allocate_deadline_s,
            clock=clock,
            ledger=self.ledger,
            on_allocated=self.releases.allocated,
        )
        self.publisher = InventoryPublisher(
            kube=kube,
            vendors=self.devices,
            interval_s=config.reconcile_interval_s,
            on_error=self.metrics.api_errors.inc,
            mode=config.mode,
        )
        self.group = TaskGroup(f"node agent {self.node}")
        self.dirwatch = DirectoryWatch(config.device_plugin_dir)
        self.http_port: int | None = None
        self._rescan = {name: asyncio.Event() for name in host.vendors}
        self._started: set[str] = set()
        self._changed = asyncio.Event()

    # -- control -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Run every part until :meth:`stop`; raises :class:`TaskFailed` when a part failed."""
        try:
            if not self.dirwatch.start():
                log.info(
                    "polling %s every %g s",
                    self.config.device_plugin_dir,
                    self.config.socket_poll_s,
                )
            self.group.spawn("http", partial(serve_http, self))
            self.group.spawn("inventory", self.publisher.run)
            # Read before any Allocate can add to it: a restart starts from what was left.
            await asyncio.to_thread(self.ledger.load)
            self.group.spawn("release/api", self.releases.run_api)
            self.group.spawn("release/kubelet", self.releases.run_kubelet)
            self.group.spawn("release/pass", self.releases.run_release)
            for vendor in sorted(self.host.vendors):
                self.group.spawn(f"{vendor}/start", partial(self._start_vendor, vendor))
            if self.config.partition_lock_path is not None:
                self.group.spawn("partition-lock", self._watch_partition_lock)
            if self.config.mode == "dra":
                self.group.spawn("dra/foreign-slices", self._remove_foreign_slices)
            self.group.spawn("heap", self._release_start_up_heap)
            await self.group.wait()
        finally:
            await self.group.stop()
            self.dirwatch.close()
            await asyncio.to_thread(self._shutdown_vendors)

    async def stop(self) -> None:
        """Stop every part and wait for them (sticky: a later :meth:`run` starts nothing)."""
        await self.group.stop()

    def rescan(self, vendor: str | None = None) -> None:
        """Re-detect *vendor* (every vendor if ``None``) now rather than at the next interval."""
        for name, event in self._rescan.items():
            if vendor is None or name == vendor:
                event.set()

    def plugin_statuses(self) -> list[PluginStatus]:
        return [p.status for _, p in sorted(self.plugins.items())]

    async def wait_plugin(self, vendor: str) -> PluginServer:
        """The device plugin of *vendor* once it exists (after its first detection)."""
        while vendor not in self.plugins:
            changed = self._changed
            await changed.wait()
        return self.plugins[vendor]

    def readiness(self) -> list[str]:
        """Why the agent is not ready; empty when it is."""
        reasons: list[str] = []
        if self.group.stopped:
            reasons.append("stopping")
        if self.publisher.published == 0:
            reasons.append("inventory not published yet" + _said(self.publisher.last_error))
        for vendor, devices in sorted(self.devices.items()):
            if devices.state == "starting":
                reasons.append(f"vendor {vendor}: starting")
            elif devices.state != "inactive" and self.config.mode == "dra":
                dra = self.dra_plugins.get(vendor)
                if dra is None or not dra.registered:
                    last = dra.last_error if dra else ""
                    reasons.append(f"vendor {vendor}: DRA driver not registered" + _said(last))
            elif devices.state != "inactive":
                plugin = self.plugins.get(vendor)
                if plugin is None or not plugin.registered:
                    last = plugin.last_error if plugin else ""
                    reasons.append(f"vendor {vendor}: not registered with kubelet" + _said(last))
        return reasons

    async def _release_start_up_heap(self) -> None:
        """Once the agent is ready, give back what start-up freed (heap.py says why)."""
        while self.readiness():
            await asyncio.sleep(_READY_POLL_S)
        release_free_heap()

    def _signal(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _shutdown_vendors(self) -> None:
        for handle in self.host.vendors.values():
            handle.shutdown()

    # -- per vendor --------------------------------------------------------------------------

    async def _start_vendor(self, vendor: str) -> None:
        handle = self.host.vendors[vendor]
        devices = self.devices[vendor]
        while True:
            try:
                await handle.astartup()
                break
            except VendorUnavailable as exc:
                log.info("vendor %s inactive on node %s: %s", vendor, self.node, exc.reason)
                devices.set_inactive(exc.reason)
                self.publisher.poke()
                return
            except (PluginError, NativeError) as exc:
                log.error("vendor %s: startup failed, retrying: %s", vendor, exc)
                self.metrics.hook_errors.labels(vendor, "startup").inc()
                devices.set_error(f"startup failed: {exc}")
                self.publisher.poke()
                await asyncio.sleep(self.config.detect_interval_s)
        self._started.add(vendor)
        self.releases.poke()  # pods that ended while it could not be asked
        await self._detect(vendor)
        if self.config.mode == "dra":
            self._start_dra(vendor)
        else:
            self._start_device_plugin(vendor)
        self.group.spawn(f"{vendor}/detect", partial(self._detect_loop, vendor))
        self.group.spawn(f"{vendor}/health", partial(self._health_loop, vendor))
        self.group.spawn(f"{vendor}/monitor", partial(self._monitor_loop, vendor))

    def _start_device_plugin(self, vendor: str) -> None:
        handle = self.host.vendors[vendor]
        devices = self.devices[vendor]
        service = DevicePluginService(
            vendor=vendor,
            resource=handle.spec.resource_names.count,
            devices=devices,
            allocator=self.allocator,
            observe=partial(self._observe, vendor),
        )
        self.plugins[vendor] = PluginServer(service, self.config, watch=self.dirwatch)
        self._signal()
        self.group.spawn(f"{vendor}/device-plugin", self.plugins[vendor].run)

    def _start_dra(self, vendor: str) -> None:
        kube: Any = self.kube  # checked in __init__: it has the resource.k8s.io/v1 calls
        slice_kube: SliceKube = kube
        claim_kube: ClaimKube = kube
        self.slices[vendor] = SlicePublisher(
            slice_kube,
            vendor,
            self.devices[vendor],
            interval_s=self.config.reconcile_interval_s,
            on_error=self.metrics.api_errors.inc,
        )
        preparer = ClaimPreparer(
            kube=claim_kube,
            vendor=vendor,
            handle=self.host.vendors[vendor],
            devices=self.devices[vendor],
            checkpoints=Checkpoints(self.config.ledger_dir / "dra" / vendor),
            cdi_dir=self.config.cdi_dir,
            deadline_s=self.config.allocate_deadline_s,
        )
        self.dra_plugins[vendor] = DraPluginServer(
            preparer,
            plugins_dir=self.config.dra_plugins_dir,
            registry_dir=self.config.plugins_registry_dir,
            poll_s=self.config.socket_poll_s,
        )
        self._signal()
        self.group.spawn(f"{vendor}/resourceslices", self.slices[vendor].run)
        self.group.spawn(f"{vendor}/dra-plugin", self.dra_plugins[vendor].run)

    async def _remove_foreign_slices(self) -> None:
        kube: Any = self.kube
        try:
            await remove_foreign_slices(kube, list(self.host.vendors))
        except KubeError as exc:
            # Not fatal: kubelet removes a driver's slices 30 s after its plugin went away.
            log.warning("cannot look for ResourceSlices of vendors not served here: %s", exc)

    def _observe(self, vendor: str, call: str, outcome: str, seconds: float) -> None:
        self.metrics.allocate_seconds.labels(vendor, call, outcome).observe(seconds)

    async def _detect(self, vendor: str) -> None:
        handle = self.host.vendors[vendor]
        devices = self.devices[vendor]
        try:
            found = await handle.adetect()
        except VendorUnavailable as exc:
            changed = devices.set_gone(exc.reason)
        except (NativeCallTimeout, LibraryThreadStuck) as exc:
            self.metrics.hook_errors.labels(vendor, "detect").inc()
            changed = devices.set_stuck(exc.call) | devices.set_error(str(exc))
        except (PluginError, NativeError) as exc:
            log.error("vendor %s: detection failed (keeping the last devices): %s", vendor, exc)
            self.metrics.hook_errors.labels(vendor, "detect").inc()
            changed = devices.set_error(str(exc))
        else:
            changed = devices.set_detected(found)
        if changed:
            self.publisher.poke()

    async def _detect_loop(self, vendor: str) -> None:
        event = self._rescan[vendor]
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.detect_interval_s):
                    await event.wait()
            event.clear()
            await self._detect(vendor)

    async def _health_loop(self, vendor: str) -> None:
        handle = self.host.vendors[vendor]
        devices = self.devices[vendor]
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                events = await handle.acheck_health(devices.view.devices, self.config.health_wait_s)
            except (NativeCallTimeout, LibraryThreadStuck) as exc:
                self.metrics.hook_errors.labels(vendor, "check_health").inc()
                if devices.set_stuck(exc.call):
                    log.error("vendor %s: library stuck, devices unhealthy: %s", vendor, exc)
                    self.publisher.poke()
            except (PluginError, NativeError, VendorUnavailable) as exc:
                self.metrics.hook_errors.labels(vendor, "check_health").inc()
                log.warning("vendor %s: health check failed: %s", vendor, exc)
            else:
                if devices.set_stuck(None):
                    log.info("vendor %s: library answers again", vendor)
                    self.publisher.poke()
                if events is None:
                    log.info("vendor %s has no health checks; devices keep detected health", vendor)
                    return
                changed, unknown = devices.apply_health(events)
                if changed:
                    self.publisher.poke()
                if unknown:
                    log.info("vendor %s: health names unknown devices %s", vendor, sorted(unknown))
                    self.rescan(vendor)
            elapsed = loop.time() - started
            await asyncio.sleep(max(0.0, self.config.health_interval_s - elapsed))

    async def _monitor_loop(self, vendor: str) -> None:
        handle = self.host.vendors[vendor]
        devices = self.devices[vendor]
        while True:
            view = devices.view
            try:
                snapshot = await handle.amonitor(view.devices)
            except (PluginError, NativeError, VendorUnavailable) as exc:
                # Absent, not stale: a failed sample removes the vendor's figures.
                self.metrics.hook_errors.labels(vendor, "monitor").inc()
                log.warning("vendor %s: monitor failed: %s", vendor, exc)
                self.monitor.put(vendor, None)
            else:
                if snapshot is None:
                    log.info("vendor %s does not monitor; serving inventory metrics only", vendor)
                    return
                self.monitor.put(vendor, snapshot)
                known = {d.id for d in view.devices}
                if any(s.device_id not in known for s in snapshot.devices):
                    self.rescan(vendor)
            await asyncio.sleep(self.config.monitor_interval_s)

    # -- node wide ---------------------------------------------------------------------------

    async def _watch_partition_lock(self) -> None:
        path = self.config.partition_lock_path
        assert path is not None
        existed = path.exists()
        while True:
            await asyncio.sleep(PARTITION_LOCK_POLL_S)
            exists = path.exists()
            if existed and not exists:
                log.info("partition lock %s released: re-detecting", path)
                self.rescan()
            existed = exists


def _said(error: str) -> str:
    return f" ({error})" if error else ""

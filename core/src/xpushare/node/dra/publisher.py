"""Keeps one vendor's ResourceSlices in the API server in step with its devices.

Why a loop per vendor that reconciles (list, compare, write) rather than writing on change
only: kubelet deletes every ResourceSlice of its node when it starts, and a driver's slices
30 s after its plugin went away (research/k8s-apis.md §6.3), and anyone may edit or delete
them; so each pass compares what the API server holds with what the devices say, and a
change of the devices wakes the loop at once.

A pass, by the vendor's state:

* ``starting``: nothing yet (the first detection decides);
* ``ok`` / ``error`` (a failed re-detection keeps the last good devices): the pool's slices;
  when their content differs from what this process last wrote, or the API server holds
  other slices or generations, all are written again at a generation above every one seen,
  new and changed slices first, then the extra ones deleted (the scheduler uses only the
  highest generation, so the pool is never seen half old, half new);
* ``no-devices`` / ``inactive``: every slice of ours for this vendor is deleted.

Deletions are not left to the next pass: kubelet deletes the node's slices whenever it starts,
and the node would offer no devices until the reconcile interval (minutes) passed. A watch on
this node's slices of the driver wakes the loop when one is deleted, so they are back within
a round trip or two.

The first pass after a start always writes a new generation: the API server may have
reformatted the quantities we wrote (``81920Mi`` as ``80Gi``), so what it holds is not
compared with what we would write, only with what we wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Protocol

from xpushare.node.dra.slices import DOMAIN, build_slices, driver_name, pool_devices
from xpushare.node.kube import KubeError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from xpushare.node.devices import DeviceView, VendorDevices
    from xpushare.node.kube import JsonObject

log = logging.getLogger(__name__)

#: First wait after a failed pass; doubled up to the reconcile interval.
FIRST_RETRY_S = 0.5

#: Seconds a watch of our slices lasts before the next is opened (it resumes where the last
#: ended): the release tracker's figure (node/release.py), which keeps a silently dropped
#: connection from hiding a deletion for more than five minutes.
WATCH_TIMEOUT_S = 300

#: The label that marks a slice as ours, with the vendor as its value.
VENDOR_LABEL = f"{DOMAIN}/vendor"


class SliceKube(Protocol):
    """The API calls the publisher makes (``KubeClient`` has them)."""

    node_name: str

    async def get_node(self) -> JsonObject: ...

    async def list_resource_slices(self, driver: str | None = None) -> list[JsonObject]: ...

    async def create_resource_slice(self, body: JsonObject) -> JsonObject: ...

    async def replace_resource_slice(self, name: str, body: JsonObject) -> JsonObject: ...

    async def delete_resource_slice(self, name: str) -> None: ...


def _name(obj: JsonObject) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _generation(obj: JsonObject) -> int:
    value = ((obj.get("spec") or {}).get("pool") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class SlicePublisher:
    """Publishes one vendor's pool on this node; :meth:`run` until cancelled."""

    def __init__(
        self,
        kube: SliceKube,
        vendor: str,
        devices: VendorDevices,
        *,
        interval_s: float,
        on_error: Callable[[], None] = lambda: None,
    ) -> None:
        self.kube = kube
        self.vendor = vendor
        self.driver = driver_name(vendor)
        self.node = kube.node_name
        self._devices = devices
        self.interval_s = interval_s
        self._on_error = on_error
        #: The generation and the device entries this process last wrote (None: nothing).
        self.generation = 0
        self._written: list[JsonObject] | None = None
        self._node_uid: str | None = None
        #: Whether the API server keeps device taints (DRADeviceTaints: beta and on from
        #: 1.36). A server without the gate drops them silently, and a tainted (unhealthy)
        #: device would look free to new claims; once a write comes back without the taints
        #: it carried, unhealthy devices are left out of the pool instead.
        self.taints_kept = True
        #: Passes that reached the API server without an error.
        self.passes = 0
        self.last_error = ""
        self._poke = asyncio.Event()

    def poke(self) -> None:
        """Reconcile now (the devices changed, or a test asks)."""
        self._poke.set()

    async def run(self) -> None:
        watcher = asyncio.ensure_future(self.watch_deletions())
        try:
            await self._run()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def watch_deletions(self) -> None:
        """Reconcile at once when one of our slices is deleted (kubelet's start, a person).

        Only deletions wake the loop: our own writes come back as ADDED and MODIFIED events,
        and an edit by someone else is repaired by the next pass. A client without the watch
        calls (a test's stand-in) leaves repairs to the passes.
        """
        listing = getattr(self.kube, "list_resource_slices_at", None)
        watch = getattr(self.kube, "watch_resource_slices", None)
        if listing is None or watch is None:
            return
        failures = 0
        version = ""
        while True:
            try:
                if not version:
                    _, version = await listing(self.driver)
                async for event in watch(self.driver, version, WATCH_TIMEOUT_S):
                    obj = event.get("object")
                    if not isinstance(obj, dict):
                        continue
                    meta = obj.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    if event.get("type") == "DELETED":
                        log.info("ResourceSlice %s was deleted: publishing again", _name(obj))
                        self.poke()
                failures = 0
            except KubeError as exc:
                # 410 Gone (the version is too old) and every other failure: list again.
                version = ""
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    log.warning("watch of ResourceSlices of %s: %s (retrying)", self.driver, exc)
                await asyncio.sleep(
                    min(self.interval_s, FIRST_RETRY_S * 2 ** min(failures - 1, 16))
                )

    async def _run(self) -> None:
        failures = 0
        while True:
            view = self._devices.view
            try:
                await self.reconcile(view)
            except KubeError as exc:
                failures += 1
                self.last_error = str(exc)
                self._on_error()
                if failures == 1 or failures % 20 == 0:
                    log.warning("ResourceSlices of %s: %s (retrying)", self.driver, exc)
                wait = min(self.interval_s, FIRST_RETRY_S * 2 ** min(failures - 1, 16))
            else:
                failures = 0
                self.last_error = ""
                self.passes += 1
                wait = self.interval_s
            await self._wait(view.version, wait)

    async def _wait(self, seen: int, seconds: float) -> None:
        change = asyncio.ensure_future(self._devices.wait_change(seen))
        poked = asyncio.ensure_future(self._poke.wait())
        try:
            await asyncio.wait(
                {change, poked}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            change.cancel()
            poked.cancel()
            self._poke.clear()

    async def reconcile(self, view: DeviceView) -> None:
        """One pass (see the module docstring)."""
        if view.state == "starting":
            return
        existing = await self.kube.list_resource_slices(self.driver)
        if view.state in ("no-devices", "inactive"):
            for obj in existing:
                await self.kube.delete_resource_slice(_name(obj))
                log.info(
                    "deleted ResourceSlice %s: %s has no devices here", _name(obj), self.vendor
                )
            self._written = None
            return
        devices = pool_devices(view)
        if not self.taints_kept:
            devices = [d for d in devices if not d.get("taints")]
        wanted_names = {
            _name(s)
            for s in build_slices(
                node=self.node, node_uid="", vendor=self.vendor, devices=devices, generation=0
            )
        }
        current = (
            devices == self._written
            and {_name(o) for o in existing} == wanted_names
            and all(_generation(o) == self.generation for o in existing)
        )
        if current:
            return
        generation = max([self.generation, *(_generation(o) for o in existing)]) + 1
        node_uid = await self._uid()
        desired = build_slices(
            node=self.node,
            node_uid=node_uid,
            vendor=self.vendor,
            devices=devices,
            generation=generation,
        )
        by_name = {_name(o): o for o in existing}
        for obj in desired:
            old = by_name.get(_name(obj))
            if old is None:
                stored = await self.kube.create_resource_slice(obj)
            else:
                body = dict(obj)
                meta = dict(body["metadata"])
                meta["resourceVersion"] = (old.get("metadata") or {}).get("resourceVersion")
                body["metadata"] = meta
                stored = await self.kube.replace_resource_slice(_name(obj), body)
            self._check_taints_kept(obj, stored)
        for name in sorted(set(by_name) - {_name(o) for o in desired}):
            await self.kube.delete_resource_slice(name)
        self.generation = generation
        self._written = devices
        log.info(
            "published %d %s device(s) in %d ResourceSlice(s), pool %s generation %d",
            len(devices),
            self.vendor,
            len(desired),
            self.node,
            generation,
        )

    def _check_taints_kept(self, sent: JsonObject, stored: JsonObject) -> None:
        """Note a server that dropped the taints *sent* carried (see ``taints_kept``)."""
        if not self.taints_kept or not stored:
            return
        kept = {
            d.get("name")
            for d in (stored.get("spec") or {}).get("devices") or []
            if isinstance(d, dict) and d.get("taints")
        }
        dropped = [d["name"] for d in sent["spec"]["devices"] if d.get("taints")]
        if dropped and not kept & set(dropped):
            self.taints_kept = False
            log.warning(
                "the API server dropped the taints of %s devices %s: it lacks the "
                "DRADeviceTaints feature (beta and on from Kubernetes 1.36); unhealthy devices "
                "are left out of the ResourceSlices instead (docs/dra.md)",
                self.vendor,
                ", ".join(dropped[:5]),
            )
            self.poke()

    async def _uid(self) -> str:
        if self._node_uid is None:
            node = await self.kube.get_node()
            self._node_uid = str((node.get("metadata") or {}).get("uid") or "")
        return self._node_uid


async def remove_foreign_slices(kube: SliceKube, vendors: Collection[str]) -> list[str]:
    """Delete this node's slices of ours whose vendor this agent no longer serves.

    A vendor plugin uninstalled, or moved to another agent, leaves slices no plugin would
    prepare; ours are recognised by the vendor label and the driver domain together.
    """
    removed: list[str] = []
    for obj in await kube.list_resource_slices():
        labels: Any = (obj.get("metadata") or {}).get("labels") or {}
        vendor = labels.get(VENDOR_LABEL) if isinstance(labels, dict) else None
        driver = (obj.get("spec") or {}).get("driver")
        if not isinstance(vendor, str) or vendor in vendors:
            continue
        if driver != driver_name(vendor):
            continue  # not ours: someone else's slice with a look-alike label
        with contextlib.suppress(KubeError):
            await kube.delete_resource_slice(_name(obj))
            removed.append(_name(obj))
            log.info("deleted ResourceSlice %s: vendor %s is not served here", _name(obj), vendor)
    return removed

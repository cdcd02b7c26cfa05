"""GPU health: XID and ECC events from NVML, lost GPUs, and recovery.

Why: kubelet must stop placing pods on a GPU that the driver reports broken, and start again
once it works, or a node loses capacity for good after one transient fault (HAMi's plugin
never marks a GPU healthy again, research/hami-protocol.md §6.3).

The rules:

* NVML's event set delivers *critical XID* errors and *double-bit ECC* errors. An XID in
  ``ignored_xids`` (application faults such as 13 or 31, §6.5) is only logged; any other
  marks its GPU unhealthy. An event NVML cannot attribute to a GPU marks every GPU unhealthy,
  as HAMi does: the fault is real and its place unknown.
* Every check also *probes* each GPU with one cheap query. "GPU is lost" (fallen off the bus,
  reset required) marks it unhealthy: reported, never a crash.
* An unhealthy GPU is healthy again once it has answered the probe and no critical event has
  come for ``recovery_quiet_s`` seconds.

The wait for events holds the vendor's library thread, where Allocate also runs, so one check
waits at most ``event_wait_max_s`` (default 0.1 s) even when the node agent offers longer.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare.models import Device, HealthEvent
from xpushare_nvidia.calls import absent, is_lost, is_missing, mismatch, unsupported_codes
from xpushare_nvidia.lazy import pynvml

if TYPE_CHECKING:
    from xpushare_nvidia.config import NvidiaConfig
    from xpushare_nvidia.library import Nvml

log = logging.getLogger(__name__)


def watched() -> int:
    """Event types acted on: critical XIDs and uncorrectable ECC (nvmlEventType*); read
    from the bindings when first asked, not at import (lazy.py)."""
    return int(pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError)


#: At most this many events are taken per check, so a storm cannot hold the thread forever.
MAX_EVENTS_PER_CHECK: Final = 64
#: gpuInstanceId of an event that is not about a MIG instance (NVML: all ones).
_NO_INSTANCE: Final = 0xFFFFFFFF

_KEY: Final = "health"


@dataclass
class Record:
    healthy: bool = True
    reason: str = ""
    #: time.monotonic() of the last critical event or failed probe.
    last_bad: float = 0.0


@dataclass
class Watcher:
    """Health state of the vendor's GPUs, kept in ``Nvml.extra`` between checks."""

    records: dict[str, Record] = field(default_factory=dict)
    event_set: Any = None
    events_broken: bool = False
    registered: set[str] = field(default_factory=set)
    unwatched: set[str] = field(default_factory=set)

    def healthy(self, uuid: str) -> bool:
        record = self.records.get(uuid)
        return record.healthy if record else True

    def mark_bad(self, uuid: str, reason: str) -> None:
        record = self.records.setdefault(uuid, Record())
        if record.healthy or record.reason != reason:
            log.warning("vendor nvidia: GPU %s unhealthy: %s", uuid, reason)
        record.healthy = False
        record.reason = reason
        record.last_bad = time.monotonic()


def watcher(nvml: Nvml) -> Watcher:
    found = nvml.extra.get(_KEY)
    if not isinstance(found, Watcher):
        found = Watcher()
        nvml.extra[_KEY] = found
    return found


def close(nvml: Nvml) -> None:
    """Free the event set (before nvmlShutdown)."""
    found = nvml.extra.pop(_KEY, None)
    if isinstance(found, Watcher) and found.event_set is not None:
        try:
            pynvml.nvmlEventSetFree(found.event_set)
        except pynvml.NVMLError as exc:
            log.warning("vendor nvidia: nvmlEventSetFree failed: %s", exc)


def check(
    nvml: Nvml, config: NvidiaConfig, devices: Sequence[Device], wait_s: float
) -> list[HealthEvent]:
    """One health round: events, probes, recovery; the changes against *devices*."""
    w = watcher(nvml)
    for device in devices:
        if device.id not in w.records:
            w.records[device.id] = Record(
                healthy=device.healthy,
                reason="" if device.healthy else "reported unhealthy at detection",
                last_bad=0.0 if device.healthy else time.monotonic(),
            )
    _register(w, nvml, devices)
    hit = _drain(w, nvml, config, devices, min(max(wait_s, 0.0), config.event_wait_max_s))
    _probe(w, nvml, config, devices, hit)
    return [
        HealthEvent(device_id=d.id, healthy=w.records[d.id].healthy, reason=w.records[d.id].reason)
        for d in devices
        if w.records[d.id].healthy != d.healthy
    ]


def _register(w: Watcher, nvml: Nvml, devices: Sequence[Device]) -> None:
    if w.events_broken:
        return
    if w.event_set is None:
        try:
            w.event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            w.events_broken = True
            log.warning(
                "vendor nvidia: no NVML event set (%s); XIDs are not watched, GPUs are only "
                "probed for loss",
                exc,
            )
            return
    for device in devices:
        handle = nvml.handles.get(device.id)
        if handle is None or device.id in w.registered or device.id in w.unwatched:
            continue
        try:
            mask = pynvml.nvmlDeviceGetSupportedEventTypes(handle) & watched()
            if not mask:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            pynvml.nvmlDeviceRegisterEvents(handle, mask, w.event_set)
        except pynvml.NVMLError as exc:
            if is_lost(exc):
                w.mark_bad(device.id, f"GPU is lost ({exc})")
                continue
            # HAMi marks such GPUs unhealthy for good; a GPU that cannot report XIDs can
            # still work, so it stays schedulable and is probed like the others.
            w.unwatched.add(device.id)
            log.warning(
                "vendor nvidia: GPU %s cannot report XID events (%s); it is only probed",
                device.id,
                exc,
            )
            continue
        w.registered.add(device.id)


def _address(handle: Any) -> int | None:
    value: int | None = ctypes.cast(handle, ctypes.c_void_p).value
    return value


def _drain(
    w: Watcher, nvml: Nvml, config: NvidiaConfig, devices: Sequence[Device], wait_s: float
) -> set[str]:
    """Take the pending events; returns the GPUs that had a critical one."""
    if w.event_set is None:
        return set()
    by_address = {_address(h): uuid for uuid, h in nvml.handles.items()}
    hit: set[str] = set()
    timeout_ms = int(wait_s * 1000)
    for _ in range(MAX_EVENTS_PER_CHECK):
        try:
            data = pynvml.nvmlEventSetWait(w.event_set, timeout_ms)
        except (pynvml.NVMLError, *mismatch()) as exc:
            if is_missing(exc):
                # No nvmlEventSetWait_v2 in this driver: XID events cannot be read; the
                # per-GPU checks below still find lost GPUs.
                absent("nvmlEventSetWait_v2", exc)
            elif exc.value != pynvml.NVML_ERROR_TIMEOUT and not is_lost(exc):
                log.warning("vendor nvidia: waiting for NVML events failed: %s", exc)
            break
        timeout_ms = 0  # drain what is queued, do not wait again
        reason = _reason(data, config)
        if reason is None:
            continue
        uuid = by_address.get(_address(data.device))
        if uuid is None:
            for device in devices:
                w.mark_bad(device.id, f"{reason} on a GPU NVML did not name")
                hit.add(device.id)
        else:
            w.mark_bad(uuid, reason)
            hit.add(uuid)
    return hit


def _reason(data: Any, config: NvidiaConfig) -> str | None:
    """Why an event makes its GPU unhealthy, or ``None`` when it only gets logged."""
    kind = int(data.eventType)
    where = ""
    if int(data.gpuInstanceId) != _NO_INSTANCE and kind & pynvml.nvmlEventTypeXidCriticalError:
        where = (
            f" (MIG GPU instance {data.gpuInstanceId}, compute instance {data.computeInstanceId})"
        )
    if kind & pynvml.nvmlEventTypeXidCriticalError:
        xid = int(data.eventData)
        if xid in config.ignored_xids:
            log.info(
                "vendor nvidia: XID %d%s is an application error; ignored (ignored_xids)",
                xid,
                where,
            )
            return None
        return f"critical XID {xid}{where}"
    if kind & pynvml.nvmlEventTypeDoubleBitEccError:
        return "uncorrectable (double-bit) ECC error"
    return None


def _probe(
    w: Watcher, nvml: Nvml, config: NvidiaConfig, devices: Sequence[Device], hit: set[str]
) -> None:
    now = time.monotonic()
    for device in devices:
        if device.id in hit:
            continue
        record = w.records[device.id]
        problem = _probe_one(nvml, device.id)
        if problem is not None:
            w.mark_bad(device.id, problem)
            continue
        if not record.healthy and now - record.last_bad >= config.recovery_quiet_s:
            log.warning("vendor nvidia: GPU %s healthy again (was: %s)", device.id, record.reason)
            record.healthy = True
            record.reason = (
                f"answers NVML again and no critical event for {config.recovery_quiet_s:g} s"
            )


def _probe_one(nvml: Nvml, uuid: str) -> str | None:
    """``None`` if the GPU answers (or cannot be asked this); else why it is lost."""
    try:
        handle = nvml.handles.get(uuid)
        if handle is None:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_NOT_FOUND:
                    return "GPU not found by NVML any more"
                raise
            nvml.handles[uuid] = handle
        pynvml.nvmlDeviceGetMemoryInfo(handle)
    except pynvml.NVMLError as exc:
        if is_lost(exc):
            return f"GPU is lost ({exc})"
        if exc.value not in unsupported_codes():
            log.info("vendor nvidia: health probe of GPU %s: %s", uuid, exc)
    return None

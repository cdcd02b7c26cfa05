"""What the agent knows about one vendor's devices right now, and who is told when it changes.

Why one object per vendor: detection, health events, a stuck library, the device plugin's
ListAndWatch, the inventory annotation and the metrics all read or change the same facts,
and each reader must see one consistent version. Every change makes a new immutable
:class:`DeviceView` and bumps a version; ListAndWatch streams and the inventory publisher
wait for the next version instead of polling.

How health is decided, per device, newest fact first:

1. while the vendor's library thread is stuck (a call hung), every device is unhealthy;
2. the last health event about the device, if any (an XID error stays until a recovery
   event, even when a later re-detection enumerates the device as fine);
3. what the last detection said.

Kubelet device ids: each physical device is advertised as ``share_slots`` ids
``<device id>::<n>`` (HAMi's scheme, research/hami-protocol.md §6.3), so kubelet's integer
count becomes "one share of one device" per id. An id once advertised is never withdrawn
while the process lives: a device that disappears stays listed as unhealthy, because a
withdrawn id strands kubelet's checkpoint of running pods (research/gpustack-devices.md §4.1).
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from xpushare.models import Device, HealthEvent

#: Separator between a physical device id and the share number in a kubelet device id.
REPLICA_SEPARATOR = "::"

#: Digits of a share number: a device has at most a few hundred share slots, so a longer
#: number in an id kubelet sends is not ours (and is never turned into a huge integer).
MAX_SHARE_DIGITS = 6

#: ``starting``: not detected yet; ``inactive``: the vendor's library or hardware is absent
#: here (the reason says which); ``ok``/``no-devices``/``error``: as the inventory annotation.
VendorState = Literal["starting", "inactive", "ok", "no-devices", "error"]


def replica_id(device_id: str, n: int) -> str:
    """The kubelet device id of share *n* of *device_id*."""
    return f"{device_id}{REPLICA_SEPARATOR}{n}"


def physical_id(kubelet_id: str) -> str | None:
    """The physical device id of a kubelet device id, or ``None`` if it is not one of ours."""
    device, sep, n = kubelet_id.rpartition(REPLICA_SEPARATOR)
    if not sep or not device or not n.isdigit():
        return None
    return device


@dataclass(frozen=True)
class KubeletDevice:
    """One entry of ListAndWatch."""

    id: str
    healthy: bool
    numa_node: int | None


@dataclass(frozen=True)
class DeviceView:
    """One consistent version of a vendor's devices."""

    version: int
    state: VendorState
    message: str
    #: The devices as the scheduler should see them: the last good detection, health applied.
    devices: tuple[Device, ...]
    kubelet_devices: tuple[KubeletDevice, ...]
    unhealthy_reasons: dict[str, str] = field(default_factory=dict)

    def device(self, device_id: str) -> Device | None:
        for d in self.devices:
            if d.id == device_id:
                return d
        return None


class VendorDevices:
    """The live device state of one vendor (see the module docstring)."""

    def __init__(self, vendor: str) -> None:
        self.vendor = vendor
        self._detected: tuple[Device, ...] = ()
        self._state: VendorState = "starting"
        self._message = ""
        self._events: dict[str, tuple[bool, str]] = {}
        self._stuck: str | None = None
        # Every physical device ever advertised, with the most share slots it had.
        self._advertised: dict[str, tuple[int, int | None]] = {}
        self._version = 0
        self._changed = asyncio.Event()
        self._view = self._build()

    @property
    def view(self) -> DeviceView:
        return self._view

    @property
    def state(self) -> VendorState:
        return self._state

    # -- changes -----------------------------------------------------------------------------

    def set_detected(self, devices: Sequence[Device]) -> bool:
        """A detection worked; returns whether anything visible changed."""
        self._detected = tuple(devices)
        return self._update("ok" if devices else "no-devices", "")

    def set_gone(self, reason: str) -> bool:
        """Detection says the vendor cannot be used here any more: no devices, with why."""
        self._detected = ()
        return self._update("no-devices", reason)

    def set_error(self, message: str) -> bool:
        """Detection failed: keep the last good devices, report why."""
        state: VendorState = "error" if self._state != "inactive" else "inactive"
        return self._update(state, message)

    def set_inactive(self, reason: str) -> bool:
        self._detected = ()
        return self._update("inactive", reason)

    def apply_health(self, events: Iterable[HealthEvent]) -> tuple[bool, set[str]]:
        """Record health events; returns (changed, ids of devices the inventory lacks)."""
        known = {d.id for d in self._detected}
        unknown: set[str] = set()
        for event in events:
            if event.device_id not in known:
                unknown.add(event.device_id)
                continue
            self._events[event.device_id] = (event.healthy, event.reason)
        return self._update(self._state, self._message), unknown

    def set_stuck(self, what: str | None) -> bool:
        """The library thread is stuck in *what* (``None``: it answers again)."""
        self._stuck = what
        return self._update(self._state, self._message)

    def _update(self, state: VendorState, message: str) -> bool:
        self._state = state
        self._message = message
        view = self._build()
        if _same(view, self._view):
            return False
        self._version += 1
        self._view = dataclasses.replace(view, version=self._version)
        self._notify()
        return True

    def _notify(self) -> None:
        # Wake every waiter of this version, and give later waiters a fresh event.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_change(self, seen: int) -> DeviceView:
        """The current view once its version differs from *seen*."""
        while self._view.version == seen:
            await self._changed.wait()
        return self._view

    def advertises(self, kubelet_id: str) -> bool:
        """Whether *kubelet_id* is one of the ids this vendor's plugin has listed to kubelet."""
        device, _, n = kubelet_id.rpartition(REPLICA_SEPARATOR)
        slots, _ = self._advertised.get(device, (0, None))
        return n.isdigit() and len(n) <= MAX_SHARE_DIGITS and int(n) < slots

    # -- derived -----------------------------------------------------------------------------

    def _healthy(self, device: Device) -> tuple[bool, str]:
        if self._stuck is not None:
            return False, f"vendor library stuck in {self._stuck}"
        event = self._events.get(device.id)
        if event is not None:
            return event[0], event[1] or "health event"
        return device.healthy, "" if device.healthy else "detected unhealthy"

    def _build(self) -> DeviceView:
        devices: list[Device] = []
        reasons: dict[str, str] = {}
        for d in self._detected:
            healthy, reason = self._healthy(d)
            devices.append(d if d.healthy == healthy else d.model_copy(update={"healthy": healthy}))
            if not healthy:
                reasons[d.id] = reason
            slots, _ = self._advertised.get(d.id, (0, None))
            self._advertised[d.id] = (max(slots, d.share_slots), d.numa_node)
        current = {d.id: d for d in devices}
        kubelet: list[KubeletDevice] = []
        for device_id, (slots, numa) in self._advertised.items():
            now = current.get(device_id)
            for n in range(slots):
                healthy = now is not None and now.healthy and n < now.share_slots
                kubelet.append(KubeletDevice(replica_id(device_id, n), healthy, numa))
            if now is None:
                reasons.setdefault(device_id, "no longer detected")
        return DeviceView(
            version=self._version,
            state=self._state,
            message=self._message,
            devices=tuple(devices),
            kubelet_devices=tuple(kubelet),
            unhealthy_reasons=reasons,
        )


def _same(a: DeviceView, b: DeviceView) -> bool:
    return (
        a.state == b.state
        and a.message == b.message
        and a.devices == b.devices
        and a.kubelet_devices == b.kubelet_devices
    )

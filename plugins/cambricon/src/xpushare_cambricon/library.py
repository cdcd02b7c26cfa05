"""A ctypes binding of Cambricon's CNDev (``libcndev.so``): cards, memory, cores, health, sMLU.

Why our own binding: Cambricon publishes no Python binding (python-ecosystem.md §3.3). This
module is only used from node-side hooks, which xpushare runs on the vendor's library thread,
so ``cndevInit`` and every call share one OS thread, as CNDev, which promises no thread
safety, needs.

Every CNDev reading is a struct whose first field is the API version the caller speaks; the
basic readings use ``CNDEV_VERSION_5`` with the layouts of the ``cndev.h`` HAMi and
Cambricon's device plugin build against, the sMLU calls ``CNDEV_VERSION_6`` like Cambricon's
own plugin. A device is addressed by a ``cndevDevice_t`` handle (an int): newer libraries
hand it out through ``cndevGetDeviceHandleByIndex``; older ones take the card index itself.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import logging
import os
from ctypes import (
    POINTER,
    byref,
    c_char,
    c_char_p,
    c_int,
    c_int64,
    c_uint,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from xpushare.native import candidate_paths

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.native import NativeLibrary
    from xpushare_cambricon.config import CambriconConfig

log = logging.getLogger(__name__)

SONAME: Final = "libcndev.so"
#: RTLD_NOW fails a broken install at load with the loader's message; RTLD_LOCAL keeps CNDev's
#: symbols from binding another vendor's library in this process.
DLOPEN_MODE: Final = os.RTLD_NOW | os.RTLD_LOCAL

CNDEV_VERSION_5: Final = 5
CNDEV_VERSION_6: Final = 6
UUID_SIZE: Final = 37
NAME_SIZE: Final = 100  # CNDEV_MLUINSTANCE_{PROFILE,DEVICE_NODE}_NAME_BUFFER_SIZE
#: The most sMLU instances (and profile ids) one card reports: cndevSMluProfileIdInfo_t
#: holds 128 ids, and a buffer of as many instances is passed for the listing.
MAX_SMLU: Final = 128
#: cndevSMluItemEnum_t.
SMLU_MAX: Final = 0
SMLU_ITEMS: Final = 2

CNDEV_SUCCESS: Final = 0
ERROR_NAMES: Final[dict[int, str]] = {
    1: "CNDEV_ERROR_NO_DRIVER",
    2: "CNDEV_ERROR_LOW_DRIVER_VERSION",
    3: "CNDEV_ERROR_UNSUPPORTED_API_VERSION",
    4: "CNDEV_ERROR_UNINITIALIZED",
    5: "CNDEV_ERROR_INVALID_ARGUMENT",
    6: "CNDEV_ERROR_INVALID_DEVICE_ID",
    7: "CNDEV_ERROR_UNKNOWN",
    8: "CNDEV_ERROR_MALLOC",
    9: "CNDEV_ERROR_INSUFFICIENT_SPACE",
    10: "CNDEV_ERROR_NOT_SUPPORTED",
    11: "CNDEV_ERROR_INVALID_LINK",
    12: "CNDEV_ERROR_NO_DEVICES",
}
NOT_SUPPORTED: Final = 10
NO_DEVICES: Final = 12
#: cndevGetCardHealthState: 1 healthy, 0 sick (gpustack-devices.md §2.2).
HEALTHY: Final = 1


def library_candidates(config: CambriconConfig) -> list[str]:
    """Where to look for libcndev.so, best first: the configured path; under the host root,
    ``<neuware_home>/lib64`` and ``/lib`` (GPUStack's choice) and the standard library
    directories; then the bare name for the dynamic loader's search."""
    home = config.neuware_home.rstrip("/")
    extra = [f"{home}/lib64", f"{home}/lib"]
    roots = [config.host_root] if config.host_root else []
    found = candidate_paths([SONAME], roots=roots, extra_dirs=extra)
    if roots:
        first = [str(config.on_host(f"{d}/{SONAME}")) for d in extra]
        found = list(dict.fromkeys([*first, *found]))
    if config.library_path:
        found.insert(0, config.library_path)
    return list(dict.fromkeys(found))


# --- structs (cndev.h) ------------------------------------------------------------------


class CardInfo(ctypes.Structure):
    _fields_ = [("version", c_int), ("number", c_uint)]


class UUIDInfo(ctypes.Structure):
    _fields_ = [("version", c_int), ("uuid", c_uint8 * UUID_SIZE), ("ncsUUID64", c_uint64)]


class MemoryInfo(ctypes.Structure):
    """Sizes in MB."""

    _fields_ = [
        ("version", c_int),
        ("physicalMemoryTotal", c_int64),
        ("physicalMemoryUsed", c_int64),
        ("virtualMemoryTotal", c_int64),
        ("virtualMemoryUsed", c_int64),
        ("channelNumber", c_int64),
        ("channelMemoryUsed", c_int64 * 20),
    ]


class CoreCount(ctypes.Structure):
    _fields_ = [("version", c_int), ("count", c_int)]


class HealthState(ctypes.Structure):
    _fields_ = [("version", c_int), ("health", c_int)]


class UtilizationInfo(ctypes.Structure):
    _fields_ = [
        ("version", c_int),
        ("averageCoreUtilization", c_int),
        ("coreUtilization", c_int * 80),
    ]


class PCIeInfo(ctypes.Structure):
    _fields_ = [
        ("version", c_int),
        ("subsystemId", c_uint),
        ("deviceId", c_uint),
        ("vendor", c_uint16),
        ("subsystemVendor", c_uint16),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("function", c_uint),
        ("physicalSlot", c_char_p),
        ("slotID", c_int),
    ]


class TemperatureInfo(ctypes.Structure):
    """Degrees Celsius."""

    _fields_ = [
        ("version", c_int),
        ("board", c_int),
        ("cluster", c_int * 20),
        ("memoryDie", c_int * 8),
        ("chip", c_int),
        ("airInlet", c_int),
        ("airOutlet", c_int),
        ("memory", c_int),
        ("videoInput", c_int),
        ("cpu", c_int),
    ]


class PowerInfo(ctypes.Structure):
    """Watts."""

    _fields_ = [
        ("version", c_int),
        ("usage", c_int),
        ("cap", c_int),
        ("usageDecimal", c_int),
        ("machine", c_int),
        ("capDecimal", c_int),
        ("thermalDesignPower", c_uint16),
    ]


class SMluSet(ctypes.Structure):
    """A new sMLU profile: compute quota (percent) and memory (bytes)."""

    _fields_ = [("version", c_int), ("mluQuota", c_uint32), ("memorySize", c_uint64)]


class SMluProfileIdInfo(ctypes.Structure):
    _fields_ = [("version", c_int), ("count", c_int), ("profileId", c_int * MAX_SMLU)]


class SMluProfileInfo(ctypes.Structure):
    _fields_ = [
        ("version", c_int),
        ("profileId", c_int),
        ("name", c_char * NAME_SIZE),
        ("totalCapacity", c_uint32),
        ("remainCapacity", c_uint32),
        ("mluQuota", c_uint32 * SMLU_ITEMS),
        ("memorySize", c_uint64 * SMLU_ITEMS),
    ]


class SMluInfo(ctypes.Structure):
    """One sMLU instance; ``devNodeName`` is its /dev/cambricon-caps/cap_dev<N>_mi<M> node."""

    _fields_ = [
        ("version", c_int),
        ("profileId", c_int),
        ("instanceId", c_int),
        ("uuid", c_uint8 * UUID_SIZE),
        ("domain", c_int),
        ("bus", c_int),
        ("device", c_int),
        ("function", c_int),
        ("profileName", c_char * NAME_SIZE),
        ("instanceName", c_char * NAME_SIZE),
        ("devNodeName", c_char * NAME_SIZE),
        ("mluQuota", c_uint32 * SMLU_ITEMS),
        ("memorySize", c_uint64 * SMLU_ITEMS),
        ("reserved", c_uint * 128),
    ]


# --- results ------------------------------------------------------------------------------


class CndevError(RuntimeError):
    """A CNDev call failed; the message names the call, the card and the code."""

    def __init__(self, function: str, code: int, where: str = "", detail: str = "") -> None:
        self.function = function
        self.code = code
        name = ERROR_NAMES.get(code, "unknown CNDev error")
        at = f" for {where}" if where else ""
        said = f": {detail}" if detail else ""
        super().__init__(
            f"Cambricon CNDev call {function}{at} failed with {code} ({name}{said}); check the "
            "card with `cnmon` and the driver log (dmesg), and that the node agent can open "
            "/dev/cambricon_ctl"
        )


class CndevInitError(CndevError):
    """cndevInit failed: no driver, or one too old for this library."""


@dataclass(frozen=True, slots=True)
class Memory:
    total_mib: int
    used_mib: int


@dataclass(frozen=True, slots=True)
class Instance:
    """An sMLU instance of one card."""

    instance_id: int
    profile_id: int
    name: str
    uuid: str
    dev_node: str
    quota_percent: int
    memory_bytes: int
    #: The handle cndevCreateSMluInstanceByProfileId returned (destroy by handle); ``None``
    #: for an instance found rather than created by this call.
    mi_handle: int | None = None


def _text(raw: Any) -> str:
    data = bytes(raw) if not isinstance(raw, bytes) else raw
    return data.split(b"\0", 1)[0].decode("utf-8", "replace").strip()


def instance_name(namespace: str, pod: str, uid: str, container: str) -> str:
    """A stable sMLU instance name for one container, within CNDev's 100-byte buffer.

    The same container always gets the same name, so a kubelet retry of Allocate finds the
    instance the first attempt made instead of making another.
    """
    key = f"{uid or namespace + '/' + pod}/{container}".encode()
    digest = hashlib.sha256(key).hexdigest()[:16]
    return f"xps-{digest}-{container}"[: NAME_SIZE - 1]


# --- the binding --------------------------------------------------------------------------

_SIGNATURES: Final[dict[str, list[Any]]] = {
    "cndevInit": [c_int],
    "cndevRelease": [],
    "cndevGetDeviceCount": [POINTER(CardInfo)],
    "cndevGetDeviceHandleByIndex": [c_int, POINTER(c_int)],
    "cndevGetUUID": [POINTER(UUIDInfo), c_int],
    "cndevGetMemoryUsage": [POINTER(MemoryInfo), c_int],
    "cndevGetCoreCount": [POINTER(CoreCount), c_int],
    "cndevGetCardHealthState": [POINTER(HealthState), c_int],
    "cndevGetDeviceUtilizationInfo": [POINTER(UtilizationInfo), c_int],
    "cndevGetPCIeInfo": [POINTER(PCIeInfo), c_int],
    "cndevGetTemperatureInfo": [POINTER(TemperatureInfo), c_int],
    "cndevGetPowerInfo": [POINTER(PowerInfo), c_int],
    "cndevGetSMluProfileIdInfo": [POINTER(SMluProfileIdInfo), c_int],
    "cndevGetSMluProfileInfo": [POINTER(SMluProfileInfo), c_int, c_int],
    "cndevCreateSMluProfileInfo": [POINTER(SMluSet), POINTER(c_int), c_int],
    "cndevCreateSMluInstanceByProfileId": [POINTER(c_int), c_uint, c_int, c_char_p],
    "cndevGetAllSMluInstanceInfo": [POINTER(c_int), POINTER(SMluInfo), c_int],
    "cndevDestroySMluInstanceByHandle": [c_int],
    "cndevDestroySMluInstanceByInstanceName": [c_int, c_char_p],
}

#: What destroy reports when neither way of destroying an instance is possible (CNDev's
#: "not supported" class of codes; the message says what to do).
CNDEV_NOT_FOUND_CODE: Final = 7

#: Functions without which the plugin cannot work; resolved at startup so a library that
#: lacks one fails there, with the symbol named.
REQUIRED: Final = (
    "cndevInit",
    "cndevGetDeviceCount",
    "cndevGetUUID",
    "cndevGetMemoryUsage",
    "cndevGetCardHealthState",
)
#: The card's name: the newest export first, then the names older libraries use.
_NAME_FUNCTIONS: Final = ("cndevGetCardNameStringByDevId", "getCardNameStringByDevId")
#: What sMLU shares need (MLU370 and later drivers).
SMLU_FUNCTIONS: Final = (
    "cndevGetSMluProfileIdInfo",
    "cndevGetSMluProfileInfo",
    "cndevCreateSMluProfileInfo",
    "cndevCreateSMluInstanceByProfileId",
    "cndevGetAllSMluInstanceInfo",
)


class Cndev:
    """An initialised CNDev library; use it on the vendor's library thread (see :meth:`open`)."""

    def __init__(self, lib: NativeLibrary) -> None:
        self.lib = lib
        self._fns: dict[str, Callable[..., int] | None] = {}

    @classmethod
    def open(cls, lib: NativeLibrary) -> Cndev:
        """Check the required functions and call ``cndevInit(0)``.

        :raises MissingSymbol: a required function is not exported.
        :raises CndevInitError: ``cndevInit`` failed (no driver, or a driver too old).
        """
        cndev = cls(lib)
        for name in REQUIRED:
            cndev._fn(name)
        code = cndev._fn("cndevInit")(0)
        if code != CNDEV_SUCCESS:
            raise CndevInitError(
                "cndevInit",
                code,
                detail="the MLU driver is not loaded, or is older than this libcndev",
            )
        return cndev

    def close(self) -> None:
        release = self._optional("cndevRelease")
        if release is not None:
            release()

    # -- symbols ----------------------------------------------------------------------------

    def _fn(self, name: str) -> Callable[..., int]:
        fn = self._fns.get(name)
        if fn is None:
            fn = self.lib.function(name, c_int, _SIGNATURES[name])
            self._fns[name] = fn
        return fn

    def _optional(self, name: str) -> Callable[..., int] | None:
        if name not in self._fns:
            self._fns[name] = self._fn(name) if self.lib.has(name) else None
        return self._fns[name]

    def has_smlu_api(self) -> bool:
        return all(self.lib.has(name) for name in SMLU_FUNCTIONS)

    def _call(self, name: str, *args: Any, where: str = "") -> None:
        code = self._fn(name)(*args)
        if code != CNDEV_SUCCESS:
            raise CndevError(name, code, where)

    def _maybe(self, name: str, *args: Any, where: str = "") -> bool:
        """Call an optional reading: False when the library or card does not offer it."""
        fn = self._optional(name)
        if fn is None:
            return False
        code = fn(*args)
        if code == CNDEV_SUCCESS:
            return True
        if code == NOT_SUPPORTED:
            return False
        raise CndevError(name, code, where)

    # -- enumeration and identity -----------------------------------------------------------

    def count(self) -> int:
        info = CardInfo(version=CNDEV_VERSION_5)
        code = self._fn("cndevGetDeviceCount")(byref(info))
        if code == NO_DEVICES:
            return 0
        if code != CNDEV_SUCCESS:
            raise CndevError("cndevGetDeviceCount", code)
        return int(info.number)

    def handle(self, index: int) -> int:
        """The device handle of card *index* (the index itself for older libraries)."""
        fn = self._optional("cndevGetDeviceHandleByIndex")
        if fn is None:
            return index
        handle = c_int(0)
        code = fn(index, byref(handle))
        if code != CNDEV_SUCCESS:
            raise CndevError("cndevGetDeviceHandleByIndex", code, f"card {index}")
        return handle.value

    def uuid(self, handle: int) -> str:
        info = UUIDInfo(version=CNDEV_VERSION_5)
        self._call("cndevGetUUID", byref(info), handle, where=f"handle {handle}")
        return _text(info.uuid)

    def name(self, handle: int) -> str:
        for name in _NAME_FUNCTIONS:
            if self.lib.has(name):
                fn = self.lib.function(name, c_char_p, [c_int])
                raw = fn(handle)
                if raw:
                    return _text(raw)
        return ""

    def pci_bus_id(self, handle: int) -> str | None:
        info = PCIeInfo(version=CNDEV_VERSION_5)
        if not self._maybe("cndevGetPCIeInfo", byref(info), handle, where=f"handle {handle}"):
            return None
        return f"{info.domain:04x}:{info.bus:02x}:{info.device:02x}.{info.function:x}"

    # -- readings -------------------------------------------------------------------------

    def memory(self, handle: int) -> Memory:
        info = MemoryInfo(version=CNDEV_VERSION_5)
        self._call("cndevGetMemoryUsage", byref(info), handle, where=f"handle {handle}")
        return Memory(int(info.physicalMemoryTotal), int(info.physicalMemoryUsed))

    def cores(self, handle: int) -> int | None:
        info = CoreCount(version=CNDEV_VERSION_5)
        ok = self._maybe("cndevGetCoreCount", byref(info), handle, where=f"handle {handle}")
        return int(info.count) if ok else None

    def healthy(self, handle: int) -> bool:
        info = HealthState(version=CNDEV_VERSION_5)
        self._call("cndevGetCardHealthState", byref(info), handle, where=f"handle {handle}")
        return int(info.health) == HEALTHY

    def utilization(self, handle: int) -> int | None:
        info = UtilizationInfo(version=CNDEV_VERSION_5)
        ok = self._maybe(
            "cndevGetDeviceUtilizationInfo", byref(info), handle, where=f"handle {handle}"
        )
        return int(info.averageCoreUtilization) if ok else None

    def temperature_c(self, handle: int) -> int | None:
        info = TemperatureInfo(version=CNDEV_VERSION_5)
        ok = self._maybe("cndevGetTemperatureInfo", byref(info), handle, where=f"handle {handle}")
        return int(info.board) if ok else None

    def power_w(self, handle: int) -> int | None:
        info = PowerInfo(version=CNDEV_VERSION_5)
        ok = self._maybe("cndevGetPowerInfo", byref(info), handle, where=f"handle {handle}")
        return int(info.usage) if ok else None

    # -- sMLU ---------------------------------------------------------------------------------

    def smlu_supported(self, handle: int) -> bool:
        """Whether the card can be cut into sMLU instances (the API exists and answers)."""
        if not self.has_smlu_api():
            return False
        ids = SMluProfileIdInfo(version=CNDEV_VERSION_6)
        code = self._fn("cndevGetSMluProfileIdInfo")(byref(ids), handle)
        if code == CNDEV_SUCCESS:
            return True
        if code == NOT_SUPPORTED:
            return False
        raise CndevError("cndevGetSMluProfileIdInfo", code, f"handle {handle}")

    def instances(self, handle: int) -> list[Instance]:
        buffer = (SMluInfo * MAX_SMLU)()
        for item in buffer:
            item.version = CNDEV_VERSION_6
        count = c_int(MAX_SMLU)
        self._call(
            "cndevGetAllSMluInstanceInfo", byref(count), buffer, handle, where=f"handle {handle}"
        )
        return [
            Instance(
                instance_id=int(info.instanceId),
                profile_id=int(info.profileId),
                name=_text(info.instanceName),
                uuid=_text(info.uuid),
                dev_node=_text(info.devNodeName),
                quota_percent=int(info.mluQuota[SMLU_MAX]),
                memory_bytes=int(info.memorySize[SMLU_MAX]),
            )
            for info in buffer[: max(0, min(count.value, MAX_SMLU))]
        ]

    def profile_for(self, handle: int, quota_percent: int, memory_bytes: int) -> int:
        """The id of an sMLU profile with this quota and memory; created when none exists."""
        ids = SMluProfileIdInfo(version=CNDEV_VERSION_6)
        self._call("cndevGetSMluProfileIdInfo", byref(ids), handle, where=f"handle {handle}")
        for profile_id in ids.profileId[: max(0, min(ids.count, MAX_SMLU))]:
            info = SMluProfileInfo(version=CNDEV_VERSION_6)
            self._call(
                "cndevGetSMluProfileInfo", byref(info), profile_id, handle, where=f"handle {handle}"
            )
            if (
                info.mluQuota[SMLU_MAX] == quota_percent
                and info.memorySize[SMLU_MAX] == memory_bytes
            ):
                return int(profile_id)
        wanted = SMluSet(version=CNDEV_VERSION_6, mluQuota=quota_percent, memorySize=memory_bytes)
        created = c_int(-1)
        self._call(
            "cndevCreateSMluProfileInfo",
            byref(wanted),
            byref(created),
            handle,
            where=f"handle {handle}",
        )
        return created.value

    def instance_for(
        self, handle: int, name: str, quota_percent: int, memory_bytes: int
    ) -> Instance:
        """The sMLU instance named *name* on the card, created with this quota when missing."""
        for existing in self.instances(handle):
            if existing.name == name:
                return existing
        profile = self.profile_for(handle, quota_percent, memory_bytes)
        mi = c_int(-1)
        self._call(
            "cndevCreateSMluInstanceByProfileId",
            byref(mi),
            profile,
            handle,
            name.encode(),
            where=f"handle {handle}",
        )
        for created in self.instances(handle):
            if created.name == name:
                return dataclasses.replace(created, mi_handle=mi.value)
        raise CndevError(
            "cndevGetAllSMluInstanceInfo",
            7,
            f"handle {handle}",
            f"the sMLU instance {name!r} just created is not listed",
        )

    def destroy_instance(self, handle: int, name: str, mi_handle: int | None = None) -> bool:
        """Destroy the sMLU instance named *name* on the card; ``False`` if there is none.

        By name where CNDev offers it (the name is derived from the pod and container, so
        it needs nothing remembered); else by the instance handle its creation returned.
        """
        if not any(i.name == name for i in self.instances(handle)):
            return False
        where = f"handle {handle}, sMLU instance {name}"
        if self._optional("cndevDestroySMluInstanceByInstanceName") is not None:
            self._call("cndevDestroySMluInstanceByInstanceName", handle, name.encode(), where=where)
        elif mi_handle is not None and mi_handle >= 0:
            self._call("cndevDestroySMluInstanceByHandle", mi_handle, where=where)
        else:
            raise CndevError(
                "cndevDestroySMluInstanceByHandle",
                CNDEV_NOT_FOUND_CODE,
                where,
                "this CNDev cannot destroy by name and the instance's handle was not kept "
                "(the node agent stopped while creating it); destroy it with cnmon",
            )
        return True

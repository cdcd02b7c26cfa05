"""Moore Threads detection: the GPUs MTML enumerates, guest virtual devices left out
(gpustack-devices.md §1.4), each keyed by its UUID."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from xpushare.models import Device
from xpushare_others.common import sysfs
from xpushare_others.mthreads.config import VENDOR, MthreadsConfig
from xpushare_others.mthreads.library import Mtml, call_optional

MIB: Final = 1024 * 1024


@contextmanager
def device(mtml: Mtml, index: int) -> Iterator[Any]:
    handle = mtml.api.mtmlLibraryInitDeviceByIndex(index)
    try:
        yield handle
    finally:
        mtml.api.mtmlLibraryFreeDevice(handle)


@contextmanager
def memory(mtml: Mtml, dev: Any) -> Iterator[Any]:
    handle = mtml.api.mtmlDeviceInitMemory(dev)
    try:
        yield handle
    finally:
        mtml.api.mtmlDeviceFreeMemory(handle)


def uncorrected_ecc(mtml: Mtml, mem: Any) -> int | None:
    """Volatile uncorrected DRAM ECC errors, GPUStack's health signal for Moore Threads."""
    api = mtml.api
    value = call_optional(
        mtml,
        api.mtmlMemoryGetEccErrorCounter,
        mem,
        api.MTML_MEMORY_ERROR_TYPE_UNCORRECTED,
        api.MTML_VOLATILE_ECC,
        api.MTML_MEMORY_LOCATION_DRAM,
    )
    return int(value) if value is not None else None


def detect(mtml: Mtml, config: MthreadsConfig) -> list[Device]:
    api = mtml.api
    devices: list[Device] = []
    for index in range(api.mtmlLibraryCountDevice()):
        with device(mtml, index) as dev:
            prop = api.mtmlDeviceGetProperty(dev)
            if prop.virtRole == api.MTML_VIRT_ROLE_GUEST_VIRTDEVICE:
                continue
            pci = api.mtmlDeviceGetPciInfo(dev)
            raw = pci.sbdf  # pymtml's structures may already decode char arrays
            bdf = sysfs.normalize_bdf(raw.decode() if isinstance(raw, bytes) else str(raw))
            with memory(mtml, dev) as mem:
                total = api.mtmlMemoryGetTotal(mem)
                ecc = uncorrected_ecc(mtml, mem)
            cores = call_optional(mtml, api.mtmlDeviceCountGpuCores, dev)
            devices.append(
                Device(
                    vendor=VENDOR,
                    id=api.mtmlDeviceGetUUID(dev),
                    index=index,
                    model=api.mtmlDeviceGetName(dev) or "Moore Threads GPU",
                    memory_mib=int(total) // MIB,
                    compute_units=int(cores or 0),
                    share_slots=config.share_slots,
                    numa_node=sysfs.numa_node(config.sysfs_root, bdf),
                    pci_bus_id=bdf,
                    healthy=not ecc,
                    extra={"driver_version": mtml.driver_version} if mtml.driver_version else {},
                )
            )
    return devices

"""Neuron placement rules: core bitmasks on one device, contiguous blocks of whole devices.

HAMi's rules (hami-protocol.md §8.2, ``pkg/device/awsneuron/device.go``), restated:

* a request of ``aws.amazon.com/neuron: n`` is *n* whole devices; one of
  ``aws.amazon.com/neuroncore: c`` is one device with *c* cores when *c* is at most the cores
  of a device, else ``c / cores`` whole devices (*c* must then be a multiple);
* more than one device: idle, healthy devices with consecutive indices. On ``inf*`` instance
  types (a ring of devices) any run of them; on the others (trn) an aligned block of 1, 4, 8
  or 16 devices starting at a multiple of its size, and no other count; none found: HAMi's
  ``NumaNotFit``;
* one device: its cores are a bitmask; a container takes the lowest free cores it needs (the
  whole mask for a whole device).

Our slices name their cores in ``DeviceSlice.partition`` as ``cores:<mask>``; a slice without
one holds the whole device. HAMi's pod strings record the mask as the slice's cores (at most
3: HAMi handles two cores per device), which reach the ledger as that many percent; being
disjoint masks, their sum is their union.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from xpushare.models import Device, DeviceUsage

#: Block sizes of whole devices on instance types that are not a ring (HAMi's graphSelect).
ALIGNED_BLOCKS: Final = (1, 4, 8, 16)
_MASK: Final = re.compile(r"^cores:([0-9]{1,10})$")
#: HAMi's masks cover two cores: the most a HAMi-placed slice can hold.
HAMI_MASK: Final = 0b11


def full(cores: int) -> int:
    return (1 << cores) - 1


def mask_name(mask: int) -> str:
    return f"cores:{mask}"


def mask_of(partition: str | None) -> int | None:
    match = _MASK.match(partition or "") if partition and len(partition) <= 20 else None
    return int(match.group(1)) if match else None


def share(mask: int, cores: int) -> int:
    """The compute percent a slice of *mask* holds on a device of *cores*."""
    return bin(mask & full(cores)).count("1") * 100 // cores


def used_mask(device: Device, usage: DeviceUsage) -> int:
    """The cores of *device* its users hold."""
    cores = device.compute_units or device.share_slots
    whole = full(cores)
    if usage.exclusive:
        return whole
    named = [m for m in (mask_of(p) for p in usage.partitions_in_use) if m is not None]
    mask = 0
    for m in named:
        mask |= m
    unnamed = usage.used_slots - len(named)
    if unnamed > 0:
        rest = usage.used_compute_percent - sum(share(m, cores) for m in named)
        # A pod HAMi placed: its cores are its mask. Anything else is read as the whole device.
        mask |= rest if 0 < rest <= HAMI_MASK else whole
    return mask & whole


def lowest_free(used: int, cores: int, wanted: int) -> int | None:
    """The mask of the lowest *wanted* cores free on a device of *cores*; None if too few."""
    picked = 0
    for bit in range(cores):
        if wanted == 0:
            break
        if not used >> bit & 1:
            picked |= 1 << bit
            wanted -= 1
    return picked if wanted == 0 else None


def is_ring(instance_type: str) -> bool:
    """``inf*`` instance types link their devices in a ring (HAMi: name contains "inf")."""
    return "inf" in instance_type.lower()


def block(free: Sequence[bool], count: int, ring: bool) -> list[int] | None:
    """Positions of *count* consecutive free devices, by HAMi's rule; None when none."""
    if count < 1 or count > len(free):
        return None
    if not ring and count not in ALIGNED_BLOCKS:
        return None
    step = 1 if ring else count
    for start in range(0, len(free) - count + 1, step):
        if all(free[start : start + count]):
            return list(range(start, start + count))
    return None


def core_ids(index: int, cores: int, mask: int) -> Iterable[int]:
    """The node-wide NeuronCore ids of *mask* on device *index* (``index * cores + bit``)."""
    return (index * cores + bit for bit in range(cores) if mask >> bit & 1)

"""One demand against one device: the checks of the default fit, in HAMi's order
(fit.py's docstring lists them and where they differ from HAMi's), and the same answer read
from a device's signature, which lets answers be shared by devices in one state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xpushare.models import DeviceSlice, FitReason
from xpushare.scheduling.partitions import Geometry, Occupancy, Shape, slot_name
from xpushare.scheduling.request import Demand
from xpushare.scheduling.state import (
    SIG_COMPUTE_CAP,
    SIG_FREE_COMPUTE,
    SIG_FREE_MEMORY,
    SIG_GEOMETRY,
    SIG_MEMORY,
    SIG_MODEL,
    SIG_OCCUPANCY,
    SIG_USABLE,
    SIG_WHOLE,
    DeviceState,
    DeviceTable,
    booked_partition_signature,
    booked_signature,
)

#: One device given to one container: (device, MiB, compute percent, exclusive, partition).
Pick = tuple[DeviceState, int, int, bool, str | None]
#: Usage of earlier containers of the same pod, per device id: [slots, MiB, compute, excl].
Extra = dict[str, list[int]]

_NONE = (0, 0, 0, 0)


def quick_reject(table: DeviceTable, demand: Demand) -> FitReason | None:
    """A reason the demand cannot fit, read from the table's summaries; ``None``: maybe fits.

    Never rejects what the full check would accept: each test compares the demand with an
    upper bound of what any device offers.
    """
    count = demand.count
    if count > len(table.devices):
        return FitReason.TOO_FEW_DEVICES
    if count > table.n_healthy:
        # With cordoned devices the walk says which are which.
        return FitReason.UNHEALTHY if not table.n_cordoned else None
    if count > table.n_usable:
        if count > table.n_healthy - table.n_held:
            return FitReason.HELD_EXCLUSIVELY
        return FitReason.SLOTS_EXHAUSTED
    if (
        demand.idle or (demand.exclusive_on(table.sizes[2]) and table.uniform_sizes)
    ) and count > table.n_whole_free:
        # Exclusive only where every device is (an over-committed one shares it).
        return FitReason.EXCLUSIVE_CONFLICT
    if demand.partition is not None:
        return None
    if demand.compute > table.max_free_compute:
        return FitReason.INSUFFICIENT_COMPUTE
    if demand.memory_mib is not None:
        if demand.memory_mib > table.max_free_memory:
            return FitReason.INSUFFICIENT_MEMORY
    elif table.uniform_memory is not None and (
        demand.memory_for(table.uniform_memory) > table.max_free_memory
    ):
        return FitReason.INSUFFICIENT_MEMORY
    return None


def check_device(d: DeviceState, demand: Demand, extra: Extra | None) -> FitReason | Pick:
    """The first check *d* fails for *demand*, or what the demand would get on it."""
    used_slots = d.used_slots
    used_memory = d.used_memory
    used_compute = d.used_compute
    held = d.exclusive
    if extra:
        e = extra.get(d.id)
        if e is not None:
            used_slots += e[0]
            used_memory += e[1]
            used_compute += e[2]
            held += e[3]
    if not d.healthy:
        return FitReason.CORDONED if d.cordoned else FitReason.UNHEALTHY
    if (demand.include_models or demand.exclude_models) and not demand.model_allowed(d.model_key):
        return FitReason.MODEL_MISMATCH
    if (demand.include_uuids and d.id not in demand.include_uuids) or d.id in demand.exclude_uuids:
        return FitReason.UUID_MISMATCH
    if used_slots >= d.slots:
        return FitReason.SLOTS_EXHAUSTED
    if held:
        return FitReason.HELD_EXCLUSIVELY
    exclusive = demand.exclusive_on(d.compute_cap)
    if (exclusive or demand.idle) and used_slots > 0:
        return FitReason.EXCLUSIVE_CONFLICT
    compute = demand.compute
    partition = demand.partition
    geometry = d.geometry
    if geometry is not None and partition is None:
        placed = instance_for(geometry, _occupancy(d, geometry, extra), demand, d.memory_mib)
        if placed is None:
            return FitReason.PARTITION_UNAVAILABLE
        shape, start = placed
        return (d, shape.memory_mib, shape.compute_percent, False, slot_name(shape.name, start))
    if partition is not None:
        profile = d.partitions.get(partition)
        in_use = d.partitions_used.get(partition, 0)
        if extra:
            in_use += extra.get(f"{d.id}\0{partition}", _NONE)[0]
        if profile is None or in_use >= profile[2]:
            return FitReason.PARTITION_UNAVAILABLE
        need, compute = profile[0], profile[1]
    else:
        need = demand.memory_for(d.memory_mib)
    if d.memory_cap - used_memory < need:
        return FitReason.INSUFFICIENT_MEMORY
    if d.compute_cap - used_compute < compute:
        return FitReason.INSUFFICIENT_COMPUTE
    if compute == 0 and used_compute >= d.compute_cap:
        return FitReason.COMPUTE_EXHAUSTED
    return (d, need, compute, exclusive, partition)


def instance_for(
    geometry: Geometry, occ: Occupancy, demand: Demand, physical_mib: int
) -> tuple[Shape, int] | None:
    """The instance a dynamically partitioned device (dynamic MIG) gives *demand* (which
    names no profile): the whole-device profile for an exclusive demand or one asking all
    the memory, else the smallest that holds its memory and compute, at the start that
    blocks least (:meth:`Geometry.pick`, the NVIDIA fit's rule)."""
    need = demand.memory_for(physical_mib)
    whole = demand.exclusive or need >= physical_mib
    return geometry.pick(need, demand.compute, whole, occ)


def _occupancy(d: DeviceState, geometry: Geometry, extra: Extra | None) -> Occupancy:
    """The instances in use on *d*, with those the pod's earlier containers took there."""
    if not extra:
        return d.occupancy()
    prefix = f"{d.id}\0"
    names = list(d.partitions_used.elements())
    for key, booked in extra.items():
        if key.startswith(prefix):
            names.extend([key[len(prefix) :]] * booked[0])
    return geometry.occupancy(names)


def sig_booked(sig: tuple[Any, ...], demand: Demand) -> tuple[Any, ...] | None:
    """The signature a device in state *sig* would have with one part of *demand* booked
    as :func:`check_device` books it, or ``None`` if it cannot hold one (for the demands
    :func:`sig_can_host` decides)."""
    if not sig_can_host(sig, demand):
        return None
    if len(sig) > SIG_GEOMETRY:
        placed = instance_for(sig[SIG_GEOMETRY], sig[SIG_OCCUPANCY], demand, sig[SIG_MEMORY])
        assert placed is not None  # sig_can_host said so
        return booked_partition_signature(sig, *placed)
    need = demand.memory_for(sig[SIG_MEMORY])
    return booked_signature(sig, need, demand.compute, demand.exclusive_on(sig[SIG_COMPUTE_CAP]))


def sig_can_host(sig: tuple[Any, ...], demand: Demand) -> bool:
    """Whether a device in state *sig* could hold one part of *demand*.

    :func:`check_device` on the signature instead of the device: the same answer for
    demands without UUIDs or a partition (a test holds them together), which lets answers
    be shared by every device in one state.
    """
    if not sig[SIG_USABLE]:
        return False
    if (demand.include_models or demand.exclude_models) and not demand.model_allowed(
        sig[SIG_MODEL]
    ):
        return False
    if (demand.idle or demand.exclusive_on(sig[SIG_COMPUTE_CAP])) and not sig[SIG_WHOLE]:
        return False
    if demand.partition is not None:
        return False
    if len(sig) > SIG_GEOMETRY:
        occ: Occupancy = sig[SIG_OCCUPANCY]
        return instance_for(sig[SIG_GEOMETRY], occ, demand, sig[SIG_MEMORY]) is not None
    if sig[SIG_FREE_MEMORY] < demand.memory_for(sig[SIG_MEMORY]):
        return False
    free_compute: int = sig[SIG_FREE_COMPUTE]
    if free_compute < demand.compute:
        return False
    return not (demand.compute == 0 and free_compute <= 0)


def slices(picks: Sequence[Pick]) -> tuple[DeviceSlice, ...]:
    return tuple(
        DeviceSlice(
            device_id=d.id,
            index=d.index,
            memory_mib=memory,
            compute_percent=min(100, compute if not exclusive else 100),
            exclusive=exclusive,
            partition=partition,
        )
        for d, memory, compute, exclusive, partition in picks
    )


__all__ = [
    "Extra",
    "Pick",
    "check_device",
    "instance_for",
    "quick_reject",
    "sig_booked",
    "sig_can_host",
    "slices",
]

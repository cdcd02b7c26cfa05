"""Signatures: the hashable summaries of a device's (and a table's) state that decide
every fit and score, so answers are kept per state rather than per device or node.

Interned to small ints (:func:`intern_signature`), which never repeat, so caches keyed by
them never confuse two states. A signature after one more container or MIG instance is
computed from the signature alone (:func:`booked_signature`), which lets the batch search of
the fragmentation policies try placements without devices.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xpushare.scheduling.partitions import Geometry, Occupancy, Shape

#: Device capacity is measured in thousandths of a device for fragmentation and scoring, the
#: unit of the openb trace's ``gpu_milli`` (FGD, USENIX ATC'23).
UNITS = 1000


def partition_units(geometry: Geometry, occ: Occupancy) -> int:
    """Free units of a partitioned device: its compute slices no instance takes.

    Compute slices, not the memory and compute the instances' profiles book: the profiles'
    shares are rounded (seven 1g instances of an A100 book 91 % of its compute and leave no
    slice), and memory slices without a compute slice are no capacity a task could run on.
    """
    slices = geometry.compute_slices
    return UNITS * geometry.free_compute(occ) // slices if slices > 0 else 0


def units_left(memory_cap: int, free_memory: int, compute_cap: int, free_compute: int) -> int:
    """Free units of a healthy device: the scarcer of its free memory and compute."""
    units = UNITS * free_compute // compute_cap if compute_cap > 0 else UNITS
    if memory_cap > 0:
        units = min(units, UNITS * free_memory // memory_cap)
    return max(0, min(UNITS, units))


#: Signatures seen so far, each with an id that is never reused (the table is emptied when
#: it grows past a bound; a signature seen again then gets a new id and caches keyed by the
#: old one simply miss).
_SIG_IDS: dict[tuple[Any, ...], int] = {}
_next_sig_id = itertools.count(1)
#: Bound of that table. A table signature is a tuple of device signatures (tuples shared
#: with the devices), a few hundred bytes: some 8 MB at the bound. The full openb replay
#: interns ~8,500; a scheduler one per node state and per placement the FGD policies try,
#: so a stream of requests of new sizes refills it.
MAX_INTERNED_SIGNATURES = 16_384


def intern_signature(sig: tuple[Any, ...]) -> int:
    sig_id = _SIG_IDS.get(sig)
    if sig_id is None:
        if len(_SIG_IDS) >= MAX_INTERNED_SIGNATURES:
            _SIG_IDS.clear()
        sig_id = _SIG_IDS[sig] = next(_next_sig_id)
    return sig_id


#: Positions in a device signature (see :func:`device_signature`).
SIG_MODEL, SIG_MEMORY, SIG_FREE_MEMORY, SIG_FREE_COMPUTE, SIG_WHOLE, SIG_USABLE, SIG_UNITS = range(
    7
)
#: Positions of a partitioned device's geometry and occupancy (absent for other devices).
SIG_GEOMETRY, SIG_OCCUPANCY = 12, 13
#: Position of the compute capacity (100 x compute over-commit).
SIG_COMPUTE_CAP = 8


def booked_signature(
    sig: tuple[Any, ...], memory: int, compute: int, exclusive: bool
) -> tuple[Any, ...]:
    """The signature of a device in state *sig* (usable) with one more container on it.

    Equal to :func:`device_signature` of the device after booking (a test holds them
    together); computed from the signature, so the batch search needs no device.
    """
    free_memory = sig[SIG_FREE_MEMORY] - memory
    free_compute = sig[SIG_FREE_COMPUTE] - compute
    used_slots = sig[10] + 1
    return (
        sig[SIG_MODEL],
        sig[SIG_MEMORY],
        free_memory,
        free_compute,
        False,
        not exclusive and used_slots < sig[11],
        units_left(sig[7], free_memory, sig[8], free_compute),
        sig[7],
        sig[8],
        sig[9],
        used_slots,
        sig[11],
    )


def booked_partition_signature(sig: tuple[Any, ...], shape: Shape, start: int) -> tuple[Any, ...]:
    """The signature of a partitioned device in state *sig* (usable) with one more instance
    of *shape* at *start*, booked as the fit books it (the profile's memory and compute, not
    exclusive). Equal to :func:`device_signature` after booking (a test holds them)."""
    geometry: Geometry = sig[SIG_GEOMETRY]
    occ = geometry.with_instance(sig[SIG_OCCUPANCY], shape, start)
    used_slots = sig[10] + 1
    return (
        sig[SIG_MODEL],
        sig[SIG_MEMORY],
        sig[SIG_FREE_MEMORY] - shape.memory_mib,
        sig[SIG_FREE_COMPUTE] - shape.compute_percent,
        False,
        used_slots < sig[11],
        partition_units(geometry, occ),
        sig[7],
        sig[8],
        sig[9],
        used_slots,
        sig[11],
        geometry,
        occ,
    )


__all__ = [
    "MAX_INTERNED_SIGNATURES",
    "SIG_COMPUTE_CAP",
    "SIG_FREE_COMPUTE",
    "SIG_FREE_MEMORY",
    "SIG_GEOMETRY",
    "SIG_MEMORY",
    "SIG_MODEL",
    "SIG_OCCUPANCY",
    "SIG_UNITS",
    "SIG_USABLE",
    "SIG_WHOLE",
    "UNITS",
    "booked_partition_signature",
    "booked_signature",
    "intern_signature",
    "partition_units",
    "units_left",
]

"""Geometry of devices that are cut into partitions at allocation time (dynamic MIG and kin).

Why geometry and not counts: the instances of a partitionable device occupy *slices*, and a
profile may start only at some slices (its placements). Two profiles that each have a free
instance by count may still not fit together: on an A100 a 1g instance at slice 0 leaves
three 2g instances by count, yet no 4g or 7g instance fits any more. So a device publishes
its profiles with their placements (:class:`~xpushare.models.PartitionProfile`), the
scheduler books an instance as ``"<profile>@<start>"`` (:func:`slot_name`), and the fit
places each new instance where it overlaps nothing booked and blocks the least.

Vendor-neutral: NVIDIA's MIG fills it from NVML; any vendor whose hardware partitions have
start/size placements over a row of slices (T-Head's PPU) reuses it unchanged.

Everything here is pure and cached: a device's geometry is decoded once per profile table
(:func:`geometry_of`), and the occupancy of a device is a bit mask, so ``/filter`` pays a few
integer operations per device, not a decode.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from xpushare.models import DeviceSlice, PartitionPlacement, PartitionProfile
from xpushare.models.device import MAX_SLICES

#: Separator between a profile and the slice its instance starts at, in booked names.
SLOT_SEPARATOR: Final = "@"
#: Profile table objects remembered at most, each pointing at the geometry of its content.
#: Every device of every node has its own table object (decoded from its node's annotation),
#: so this is sized for a fleet: 5,000 nodes x 8 GPUs, with room to spare; an entry is two
#: references (the tables themselves belong to the inventory). Past the bound it is emptied.
IDENTITY_LIMIT: Final = 65_536
#: Distinct geometries (by content) kept at most: a fleet has a handful of GPU models.
CACHE_LIMIT: Final = 1024
#: Answers kept per geometry (occupancies decoded, placements chosen): nodes in the same
#: state ask the same questions, so a few thousand serve a fleet. Emptied past the bound.
ANSWERS_LIMIT: Final = 4096


@dataclass(frozen=True, slots=True)
class Shape:
    """One profile with its placements as slice masks."""

    name: str
    memory_mib: int
    compute_percent: int
    compute_slices: int
    max_count: int
    starts: tuple[int, ...]
    masks: tuple[int, ...]  # one per start: the slices an instance there occupies


@dataclass(frozen=True, slots=True, order=True)
class Occupancy:
    """What is booked on one device: the slices taken, compute slices taken, per-profile count.

    ``broken`` names a booked entry that the geometry cannot place (an unknown profile or
    start, or an overlap): the device is then treated as full, since what it holds is not
    known, which can refuse a fit but never double-books slices.

    Ordered (by its fields) because it is part of a device's signature, and signatures are
    sorted (:func:`~xpushare.scheduling.state.device_signature`).
    """

    mask: int = 0
    compute: int = 0
    counts: tuple[tuple[str, int], ...] = ()
    broken: str = ""

    def count(self, name: str) -> int:
        for n, c in self.counts:
            if n == name:
                return c
        return 0


_serials = itertools.count()


class Geometry:
    """The partition geometry of one device model, decoded from its published profiles.

    Equal by identity (every device with the same profiles shares one object, see
    :func:`geometry_of`) and ordered by when it was decoded: it is part of a device's
    signature, which is sorted, and decoding follows the inventory's order, so the order of
    signatures is the same in every run.
    """

    __slots__ = (
        "_choices",
        "_occupancies",
        "by_name",
        "compute_slices",
        "serial",
        "shapes",
        "slices",
        "whole",
    )

    def __init__(self, shapes: Sequence[Shape], compute_slices: int, slices: int) -> None:
        # Smallest first: by memory, then compute, then name (HAMi's order, §5.2).
        self.shapes = tuple(sorted(shapes, key=lambda s: (s.memory_mib, s.compute_slices, s.name)))
        self.by_name = {s.name: s for s in self.shapes}
        self.compute_slices = compute_slices
        self.slices = slices
        #: The profile whose one instance is the whole device (7g on an A100), if any: the
        #: one that takes every compute slice, the largest memory among such.
        spanning = [s for s in self.shapes if s.compute_slices >= compute_slices]
        self.whole: Shape | None = spanning[-1] if spanning else None
        # The fit asks per node and device: answers are shared by every device of this
        # geometry in the same state (the same booked names, the same request).
        self._occupancies: dict[tuple[str, ...], Occupancy] = {}
        self._choices: dict[tuple[Any, ...], tuple[Shape, int] | None] = {}
        self.serial = next(_serials)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Geometry):
            return NotImplemented
        return self.serial < other.serial

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Geometry):
            return NotImplemented
        return self.serial > other.serial

    # -- booked names -----------------------------------------------------------------

    def occupancy(self, in_use: Iterable[str]) -> Occupancy:
        """The occupancy the booked names (``"<profile>@<start>"``) make on the device."""
        key = tuple(sorted(in_use))
        found = self._occupancies.get(key)
        if found is None:
            found = self._occupancy(key)
            if len(self._occupancies) >= ANSWERS_LIMIT:
                self._occupancies.clear()
            self._occupancies[key] = found
        return found

    def _occupancy(self, in_use: tuple[str, ...]) -> Occupancy:
        mask = 0
        compute = 0
        counts: dict[str, int] = {}
        for name in in_use:
            parsed = parse_slot(name)
            shape = self.by_name.get(parsed[0]) if parsed else None
            if parsed is None or shape is None or parsed[1] not in shape.starts:
                return Occupancy(mask=self.full_mask, compute=self.compute_slices, broken=name)
            m = shape.masks[shape.starts.index(parsed[1])]
            if mask & m:
                return Occupancy(mask=self.full_mask, compute=self.compute_slices, broken=name)
            mask |= m
            compute += shape.compute_slices
            counts[shape.name] = counts.get(shape.name, 0) + 1
        return Occupancy(mask=mask, compute=compute, counts=tuple(sorted(counts.items())))

    @property
    def full_mask(self) -> int:
        return (1 << self.slices) - 1

    # -- placing ----------------------------------------------------------------------

    def free_starts(self, shape: Shape, occ: Occupancy) -> list[int]:
        """Where an instance of *shape* could be created now (NVML's rules: no overlap, at
        most ``max_count`` instances of a profile, compute slices within the device's)."""
        if occ.count(shape.name) >= shape.max_count:
            return []
        if occ.compute + shape.compute_slices > self.compute_slices:
            return []
        return [s for s, m in zip(shape.starts, shape.masks, strict=True) if not occ.mask & m]

    def holding(self, memory_mib: int, compute_percent: int) -> list[Shape]:
        """The profiles that hold *memory_mib* and *compute_percent*, smallest first."""
        return [
            s
            for s in self.shapes
            if s.memory_mib >= memory_mib and s.compute_percent >= compute_percent
        ]

    def place(self, shape: Shape, occ: Occupancy) -> int | None:
        """The start for a new instance of *shape* that leaves the most room, or ``None``.

        Room is :meth:`room` after the instance: first the largest profile that still fits,
        then how many placements stay free; ties go to the lowest start. On an empty A100 this
        puts a 1g or 3g instance at the last start, as HAMi's fixed preference does (§5.2),
        and also a 2g instance at 4 rather than HAMi's 0, where it would block 4g; and it
        follows from any occupancy, not from the profile's name.
        """
        best: tuple[tuple[int, int], int] | None = None
        for start in self.free_starts(shape, occ):
            after = self.with_instance(occ, shape, start)
            key = (self.room(after), -start)
            if best is None or key > (best[0], -best[1]):
                best = (key[0], start)
        return None if best is None else best[1]

    def choose(
        self, memory_mib: int, compute_percent: int, occ: Occupancy, named: str | None = None
    ) -> tuple[Shape, int] | None:
        """The profile and start for one new instance: *named*, else the smallest profile
        that holds the memory and compute asked and has a free placement."""
        key = (memory_mib, compute_percent, named, occ)
        if key in self._choices:
            return self._choices[key]
        found = self._choose(memory_mib, compute_percent, occ, named)
        if len(self._choices) >= ANSWERS_LIMIT:
            self._choices.clear()
        self._choices[key] = found
        return found

    def _choose(
        self, memory_mib: int, compute_percent: int, occ: Occupancy, named: str | None
    ) -> tuple[Shape, int] | None:
        if named is not None:
            shape = self.by_name.get(named)
            candidates = [shape] if shape is not None else []
        else:
            candidates = self.holding(memory_mib, compute_percent)
        for shape in candidates:
            start = self.place(shape, occ)
            if start is not None:
                return shape, start
        return None

    def pick(
        self, memory_mib: int, compute_percent: int, whole: bool, occ: Occupancy
    ) -> tuple[Shape, int] | None:
        """The instance the fit gives a request that names no profile: for the whole device
        (exclusive, or all its memory) the profile that spans it, else :meth:`choose`.

        The rule of the NVIDIA plugin's dynamic MIG fit (``_mig_instances_for``, HAMi's MIG
        mode: research/hami-protocol.md §5.2); the core's default fit and the fragmentation
        measures use it so that they see the instance the fit would create.
        """
        if whole:
            if self.whole is None:
                return None
            return self.choose(0, 0, occ, named=self.whole.name)
        return self.choose(memory_mib, compute_percent, occ)

    def free_compute(self, occ: Occupancy) -> int:
        """Compute slices not taken by the instances of *occ* (none when it is broken)."""
        return max(0, self.compute_slices - occ.compute)

    def with_instance(self, occ: Occupancy, shape: Shape, start: int) -> Occupancy:
        counts = dict(occ.counts)
        counts[shape.name] = counts.get(shape.name, 0) + 1
        return Occupancy(
            mask=occ.mask | shape.masks[shape.starts.index(start)],
            compute=occ.compute + shape.compute_slices,
            counts=tuple(sorted(counts.items())),
        )

    # -- what is left -----------------------------------------------------------------

    def fits_left(self, occ: Occupancy) -> tuple[Shape, ...]:
        """The profiles of which one more instance could still be created."""
        return tuple(s for s in self.shapes if self.free_starts(s, occ))

    def room(self, occ: Occupancy) -> tuple[int, int]:
        """(compute slices of the largest profile that still fits, free placements left)."""
        largest = 0
        free = 0
        for s in self.shapes:
            n = len(self.free_starts(s, occ))
            if n:
                largest = max(largest, s.compute_slices)
                free += n
        return largest, free

    def free_fraction(self, occ: Occupancy) -> float:
        """What the fragmentation measures read for such a device, in [0, 1]: the compute of
        the largest profile that still fits over the device's. Free slices that no profile
        can use any more count for nothing, which is the point."""
        if self.compute_slices <= 0:
            return 0.0
        return self.room(occ)[0] / self.compute_slices


def place_instances(
    geometry: Geometry,
    device_id: str,
    index: int,
    in_use: Iterable[str],
    count: int,
    memory_mib: int,
    compute_percent: int,
    named: str | None = None,
) -> list[DeviceSlice]:
    """Up to *count* new instances on one device of *geometry* holding *in_use*, each the
    profile *named* (else the smallest holding *memory_mib* and *compute_percent*: a named
    profile is taken whatever its compute) where it blocks least, booked as
    ``"<profile>@<start>"``. Shared by every vendor that creates instances at Allocate."""
    occ = geometry.occupancy(in_use)
    out: list[DeviceSlice] = []
    compute = 0 if named is not None else compute_percent
    while len(out) < count:
        chosen = geometry.choose(memory_mib, compute, occ, named=named)
        if chosen is None:
            break
        shape, start = chosen
        occ = geometry.with_instance(occ, shape, start)
        out.append(
            DeviceSlice(
                device_id=device_id,
                index=index,
                memory_mib=shape.memory_mib,
                compute_percent=shape.compute_percent,
                partition=slot_name(shape.name, start),
            )
        )
    return out


def slot_name(profile: str, start: int) -> str:
    """The booked name of an instance of *profile* starting at slice *start*."""
    return f"{profile}{SLOT_SEPARATOR}{start}"


def parse_slot(name: str) -> tuple[str, int] | None:
    """``(profile, start)`` of a booked name, or ``None`` if it is not one (bounded: the
    name may come from a pod's annotation)."""
    if len(name) > 80:
        return None
    profile, sep, start = name.rpartition(SLOT_SEPARATOR)
    if not sep or not profile or not start.isdigit() or len(start) > 2:
        return None
    value = int(start)
    return (profile, value) if value < MAX_SLICES else None


def dynamic_profile(
    name: str,
    *,
    memory_mib: int,
    compute_percent: int,
    count: int,
    compute_slices: int,
    memory_slices: int,
    starts: Iterable[int],
) -> PartitionProfile:
    """A profile of instances made on demand, as a driver reports one (NVML's GPU instance
    profile, HGML's): at most *count* at once, each taking *memory_slices* slices from one
    of *starts*; the compute share kept within 1-100 (a driver's rounding may pass 100)."""
    return PartitionProfile(
        name=name,
        memory_mib=memory_mib,
        compute_percent=max(1, min(100, compute_percent)),
        max_count=max(1, count),
        compute_slices=compute_slices,
        memory_slices=memory_slices,
        placements=tuple(PartitionPlacement(start=s, size=memory_slices) for s in starts),
    )


def is_dynamic(profiles: Sequence[PartitionProfile]) -> bool:
    """Whether a device with *profiles* has its instances created on demand."""
    return any(p.placements for p in profiles)


_by_identity: dict[int, tuple[Sequence[PartitionProfile], Geometry | None]] = {}
_by_content: dict[tuple[PartitionProfile, ...], Geometry | None] = {}


def geometry_of(profiles: Sequence[PartitionProfile]) -> Geometry | None:
    """The geometry of a device with *profiles*; ``None`` when they have no placements.

    Looked up by the identity of the profile table first (O(1); the entry holds the table,
    so its id cannot be reused for another while the entry lives), then by its content, so
    every device of one GPU model shares one decoded geometry and its answers.
    """
    key = id(profiles)
    found = _by_identity.get(key)
    if found is not None and found[0] is profiles:
        return found[1]
    content = tuple(profiles)
    if content in _by_content:
        geometry = _by_content[content]
    else:
        geometry = _decode(profiles)
        if len(_by_content) >= CACHE_LIMIT:
            _by_content.clear()
        _by_content[content] = geometry
    if len(_by_identity) >= IDENTITY_LIMIT:
        _by_identity.clear()
    _by_identity[key] = (profiles, geometry)
    return geometry


def _decode(profiles: Sequence[PartitionProfile]) -> Geometry | None:
    shapes: list[Shape] = []
    end = 0
    for p in profiles:
        if not p.placements:
            continue
        starts = tuple(sorted({pl.start for pl in p.placements}))
        sizes = {pl.start: pl.size for pl in p.placements}
        masks = tuple(((1 << sizes[s]) - 1) << s for s in starts)
        end = max(end, *(s + sizes[s] for s in starts))
        shapes.append(
            Shape(
                name=p.name,
                memory_mib=p.memory_mib,
                compute_percent=p.compute_percent,
                compute_slices=max(1, p.compute_slices),
                max_count=p.max_count,
                starts=starts,
                masks=masks,
            )
        )
    if not shapes:
        return None
    # The device's compute slices: no profile's instances together can exceed them, so the
    # largest slices x count bounds them from below and, on every MIG GPU, is them (A100:
    # 1g x 7 = 7g x 1 = 7; A30: 1g x 4 = 4g x 1 = 4), even when some profiles are left out.
    compute = max(s.compute_slices * s.max_count for s in shapes)
    return Geometry(shapes, compute_slices=compute, slices=end)

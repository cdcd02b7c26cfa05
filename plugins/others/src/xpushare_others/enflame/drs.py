"""Enflame DRS profiles: what they are, which one a request gets, how many slices are used.

HAMi's rules (hami-protocol.md §8.2, ``pkg/device/enflame/device.go``), restated:

* a profile is named ``<slices>g.<memory>gb`` (case and spaces ignored); its compute share is
  ``ceil(slices * 100 / largest slices)`` percent of the GCU;
* the candidates are the node's profiles ordered by slices, then memory;
* ``enflame.com/drs-gcu: n`` asks for the profile of exactly *n* slices;
* ``enflame.com/gcu-memory`` / ``enflame.com/gcu-core`` ask for the first candidate with at
  least that memory and that compute; a bare memory number is GB, unless it is over twice the
  memory of the largest profile, when it is MiB (rounded up to GB); one with a unit is bytes;
* no such profile: the request does not fit (HAMi's ``ModeNotFit``).

A request is carried from the parser to the fit in ``ContainerRequest.partition``, written
and read here (:func:`encode_ask`, :func:`decode_ask`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

#: ``3g.20gb``: HAMi's parseProfile, bounded (a node's settings are input too).
_PROFILE: Final = re.compile(r"^([0-9]{1,4})g?\.([0-9]{1,6})(?:gb)?$")
#: A request as the parser writes it into ``partition``.
_ASK: Final = re.compile(
    r"^drs:(?:slices=([0-9]{1,4})|(gb|mib|raw)=([0-9]{1,9}),core=([0-9]{1,3}))$"
)
#: Prefix of the device's ``extra`` keys holding Enflame's profile id per profile name.
PROFILE_ID_PREFIX: Final = "drs-profile-id/"


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    id: str
    slices: int
    memory_gb: int
    compute_percent: int

    @property
    def memory_mib(self) -> int:
        return self.memory_gb * 1024


@dataclass(frozen=True, slots=True)
class Ask:
    """A DRS request: an exact slice count, or memory and compute (``unit`` says how)."""

    slices: int | None = None
    #: ``gb``: memory in GB; ``mib``: in MiB (a value with a unit); ``raw``: a bare number,
    #: GB or MiB by HAMi's rule against the node's profiles.
    unit: str = "raw"
    memory: int = 0
    core: int = 0


def parse_profile_name(name: str) -> tuple[int, int] | None:
    """(slices, memory GB) of a profile name, or None when it is not one."""
    match = _PROFILE.match(name.strip().lower()) if len(name) <= 40 else None
    if not match:
        return None
    slices, memory = int(match.group(1)), int(match.group(2))
    return (slices, memory) if slices > 0 and memory > 0 else None


def profiles(named: Mapping[str, str]) -> list[Profile]:
    """The candidates of a GCU's profiles (name → id), in HAMi's order."""
    parsed = [(n, i, parse_profile_name(n)) for n, i in named.items()]
    valid = [(n, i, p) for n, i, p in parsed if p is not None]
    if not valid:
        return []
    largest = max(p[0] for _, _, p in valid)
    out = [
        Profile(n, i, p[0], p[1], min(100, math.ceil(p[0] * 100 / largest))) for n, i, p in valid
    ]
    return sorted(out, key=lambda c: (c.slices, c.memory_gb, c.name))


def capacity(named: Iterable[str], configured: int | None) -> int:
    """Slices of one GCU: as configured, else those of its largest profile."""
    if configured is not None:
        return configured
    sizes = [p[0] for p in (parse_profile_name(n) for n in named) if p is not None]
    return max(sizes, default=1)


def encode_ask(ask: Ask) -> str:
    if ask.slices is not None:
        return f"drs:slices={ask.slices}"
    return f"drs:{ask.unit}={ask.memory},core={ask.core}"


def decode_ask(partition: str | None) -> Ask | None:
    match = _ASK.match(partition or "") if partition and len(partition) <= 64 else None
    if not match:
        return None
    if match.group(1) is not None:
        return Ask(slices=int(match.group(1)))
    return Ask(unit=match.group(2), memory=int(match.group(3)), core=int(match.group(4)))


def memory_gb(ask: Ask, largest_gb: int) -> int:
    """The memory *ask* wants in GB (0: any), by HAMi's normalizeMemoryRequestToGB."""
    if ask.memory <= 0:
        return 0
    if ask.unit == "gb":
        return ask.memory
    if ask.unit == "mib" or ask.memory > largest_gb * 2:
        return -(-ask.memory // 1024)
    return ask.memory


def select(candidates: list[Profile], ask: Ask) -> Profile | None:
    """The profile *ask* gets among *candidates* (HAMi's selectProfileByRequest)."""
    if not candidates:
        return None
    if ask.slices is not None:
        return next((c for c in candidates if c.slices == ask.slices), None)
    gb = memory_gb(ask, candidates[-1].memory_gb)
    for c in candidates:
        if gb > 0 and c.memory_gb < gb:
            continue
        if ask.core > 0 and c.compute_percent < ask.core:
            continue
        return c
    return None


def used_slices(
    in_use: Iterable[str],
    used_slots: int,
    used_memory_mib: int,
    by_name: Mapping[str, Profile],
    capacity: int,
    memory_mib: int,
) -> int:
    """Slices a GCU's users hold (a GCU of *capacity* slices and *memory_mib* of memory).

    Ours name their profile (``partitions_in_use``). A pod HAMi placed names none (HAMi's pod
    string holds memory and cores only), so its slices are counted from its memory, rounded
    up, and at least one each: never fewer than it holds.
    """
    named = [by_name[n] for n in in_use if n in by_name]
    total = sum(p.slices for p in named)
    unnamed = max(0, used_slots - len(named))
    if unnamed:
        rest = max(0, used_memory_mib - sum(p.memory_mib for p in named))
        total += max(unnamed, -(-rest * capacity // max(1, memory_mib)))
    return total

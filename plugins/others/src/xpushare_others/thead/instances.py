"""T-Head MIG instances cut at Allocate and destroyed at release, with the node's record of them.

Why a record per container (``<journal_dir>/<pod uid>_<container>.json``), written before
creation: the agent may stop at any moment, and a release may come with no record of the
Allocate (the agent stopped while it ran). Each instance is an *intent* (PPU, profile, start)
before it is created and is completed with its GPU and compute instance ids after, as NVIDIA's
dynamic MIG records its instances (``xpushare_nvidia.journal``); so a release, after a restart
too, finds every instance the container may hold, and nothing else is ever destroyed: detection
and startup destroy nothing, and an instance another container's record names is left alone
(HGML reuses ids, so the same id at the same place may be a newer pod's).

A container gets its PPU's nodes and the capability nodes of its GPU and compute instances,
read from the driver's procfs record at Allocate (GPUStack's thead-mig.md: each
``<capabilities_root>/ppu<N>/mig/gi<G>[/ci<C>]/access`` names ``alixpu-cap<minor>`` under
``/dev/alixpu-caps``); a missing one fails the Allocate and the instance is destroyed again.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from xpushare.native.records import RecordFiles
from xpushare.scheduling.partitions import parse_slot
from xpushare_others.thead import mig

if TYPE_CHECKING:
    from ctypes import c_void_p

    from xpushare.models import AllocateRequest, DeviceSlice, PodRef, ReleaseRequest
    from xpushare_others.thead.config import TheadConfig
    from xpushare_others.thead.library import Hgml

#: Bytes of one procfs access file that are read (two short lines).
MAX_ACCESS_BYTES: Final = 4096
_MINOR: Final = re.compile(r"^DeviceFileMinor:\s*([0-9]{1,9})\s*$", re.MULTILINE)
_SAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")


def record_name(pod: PodRef, container: str) -> str:
    return f"{_SAFE.sub('_', (pod.uid or str(pod))[:64])}_{_SAFE.sub('_', container[:63])}"


class Journal(RecordFiles):
    """The record files in *directory* (on the node's disk, under kubelet's plugin dir)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, valid=_valid, what="vendor thead: MIG record")

    def claimed(self, skip: str, ppu: int, profile: str, start: int) -> bool:
        """Whether another container's record names an instance at this place."""
        return any(
            (e["ppu"], e["profile"], e["start"]) == (ppu, profile, start)
            for n in self.names()
            if n != skip
            for e in self.read(n)
        )


def _valid(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("ppu"), int)
        and 0 <= entry["ppu"] < 1024
        and isinstance(entry.get("profile"), str)
        and len(entry["profile"]) <= 64
        and isinstance(entry.get("start"), int)
        and 0 <= entry["start"] < 64
    )


def _instance(entry: dict[str, Any]) -> mig.Instance | None:
    if not all(isinstance(entry.get(k), int) for k in ("gi", "ci")):
        return None  # an intent: created or not, unknown
    return mig.Instance(entry["ppu"], entry["profile"], entry["start"], entry["gi"], entry["ci"])


def _cap_node(config: TheadConfig, ppu: int, gi: int, ci: int | None) -> str:
    """The capability device node the driver's procfs record names for an instance."""
    rel = f"ppu{ppu}/mig/gi{gi}" + (f"/ci{ci}" if ci is not None else "")
    path = Path(config.capabilities_root) / rel / "access"
    try:
        with path.open("rb") as f:
            text = f.read(MAX_ACCESS_BYTES).decode(errors="replace")
    except OSError as exc:
        raise mig.MigError(f"the driver's capability record {path} cannot be read: {exc}") from exc
    found = _MINOR.search(text)
    if found is None:
        raise mig.MigError(f"the driver's capability record {path} names no DeviceFileMinor")
    return f"{config.capability_nodes}/alixpu-cap{int(found.group(1))}"


def _alive(hgml: Hgml, handle: c_void_p, made: mig.Instance, profile: mig.GiProfile) -> bool:
    found = mig.find(hgml, handle, made.gi)
    return found is not None and found[:2] == (profile.id, made.start)


def _clear_way(
    hgml: Hgml,
    journal: Journal,
    handle: c_void_p,
    ppu: int,
    profile: mig.GiProfile,
    start: int,
    profiles: tuple[mig.GiProfile, ...],
    who: str,
) -> None:
    """Destroy the idle instances in the slices the new one takes (left by ended pods whose
    release has not run: the scheduler booked these slices for this container), and drop them
    from their records; refuse while one of them is in use."""
    want = ((1 << profile.memory_slices) - 1) << start
    for other, at, gi in mig.instances(hgml, handle, profiles):
        if not want & (((1 << other.memory_slices) - 1) << at):
            continue
        stale = mig.Instance(ppu, other.name, at, gi, 0)
        for name in journal.names():
            entries = journal.read(name)
            for e in entries:
                if (e["ppu"], e["profile"], e["start"]) == (ppu, other.name, at):
                    stale = _instance(e) or stale
            kept = [
                e for e in entries if (e["ppu"], e["profile"], e["start"]) != (ppu, other.name, at)
            ]
            if len(kept) != len(entries):
                journal.write(name, kept)
        if not mig.destroy(hgml, handle, stale, other):
            raise mig.MigError(
                f"MIG instance {other.name}@{at} (GPU instance {gi}) on PPU {ppu} is still in "
                f"use and overlaps {profile.name}@{start}, given to {who}; retried when it ends"
            )


def cut(
    hgml: Hgml, config: TheadConfig, request: AllocateRequest, pieces: list[DeviceSlice], who: str
) -> tuple[list[str], list[str]]:
    """(device nodes, ``<profile>@<start>/<gi>/<ci>`` names) of one new instance per slice."""
    journal = Journal(Path(config.journal_dir))
    name = record_name(request.pod, request.container)
    entries = journal.read(name)
    by_id = {d.id: d for d in request.devices}
    nodes: list[str] = []
    names: list[str] = []
    for piece in pieces:
        ppu = by_id[piece.device_id].index
        profile_name, start = parse_slot(piece.partition or "") or ("", -1)
        profiles = hgml.geometry.get(ppu, ())
        profile = next((p for p in profiles if p.name == profile_name), None)
        if profile is None or start not in profile.starts:
            raise mig.MigError(
                f"PPU {ppu} offers no MIG instance {piece.partition} (it is not in MIG mode, or "
                "lacks that profile or start): the pod was placed on an outdated inventory; "
                "delete it to have it placed again"
            )
        handle = hgml.handle(ppu)
        here = (ppu, profile.name, start)
        mine = next(
            (
                i
                for i in map(_instance, entries)
                if i is not None and (i.ppu, i.profile, i.start) == here
            ),
            None,
        )
        if mine is None or not _alive(hgml, handle, mine, profile):
            entries = [e for e in entries if (e["ppu"], e["profile"], e["start"]) != here]
            _clear_way(hgml, journal, handle, ppu, profile, start, profiles, who)
            entries.append({"ppu": ppu, "profile": profile.name, "start": start})
            journal.write(name, entries)
            try:
                mine = mig.create(hgml, handle, ppu, profile, start)
            except mig.MigError:
                journal.write(name, entries[:-1])
                raise
            entries[-1] = asdict(mine)
            journal.write(name, entries)
        try:
            caps = [_cap_node(config, ppu, mine.gi, None), _cap_node(config, ppu, mine.gi, mine.ci)]
        except mig.MigError:
            if mig.destroy(hgml, handle, mine, profile):
                journal.write(name, [e for e in entries if _instance(e) != mine])
            raise
        nodes.extend(caps)
        names.append(f"{profile.name}@{start}/{mine.gi}/{mine.ci}")
    return nodes, names


def release(hgml: Hgml | None, config: TheadConfig, request: ReleaseRequest) -> None:
    """Destroy the instances the records name for the ended pod's containers; raise (to be
    called again later) while one is in use or HGML is not loaded."""
    journal = Journal(Path(config.journal_dir))
    busy: list[str] = []
    for container in sorted({c.container for c in request.containers}):
        name = record_name(request.pod, container)
        entries = journal.read(name)
        if not entries:
            continue
        if hgml is None or not hgml.geometry:
            # Not loaded, or not detected yet: what the records name cannot be checked.
            raise RuntimeError(
                f"vendor thead: MIG instances of pod {request.pod} cannot be destroyed: HGML is "
                "not loaded or the PPUs are not detected yet (retried later)"
            )
        left = []
        for entry in entries:
            place = (entry["ppu"], entry["profile"], entry["start"])
            profiles = hgml.geometry.get(entry["ppu"], ())
            profile = next((p for p in profiles if p.name == entry["profile"]), None)
            if profile is None or journal.claimed(name, *place):
                continue  # the PPU is not in MIG mode now, or a later pod holds that place
            handle = hgml.handle(entry["ppu"])
            made = _instance(entry) or _intended(hgml, handle, entry, profiles)
            if made is not None and not mig.destroy(hgml, handle, made, profile):
                left.append(entry)
                busy.append(f"{place[1]}@{place[2]} on PPU {place[0]}")
        journal.write(name, left)
    if busy:
        raise RuntimeError(
            f"vendor thead: MIG instances {', '.join(busy)} of ended pod {request.pod} are still "
            "in use; they are destroyed when that ends (the release is retried)"
        )


def _intended(
    hgml: Hgml, handle: c_void_p, entry: dict[str, Any], profiles: tuple[mig.GiProfile, ...]
) -> mig.Instance | None:
    """The instance an Allocate cut short may have created at the entry's place (its compute
    instance is the first, id 0, of its GPU instance: the only one Allocate creates)."""
    for profile, start, gi in mig.instances(hgml, handle, profiles):
        if (profile.name, start) == (entry["profile"], entry["start"]):
            return mig.Instance(entry["ppu"], profile.name, start, gi, 0)
    return None

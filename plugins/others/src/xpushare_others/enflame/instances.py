"""Cutting a container's DRS instance at Allocate and destroying it when its pod has ended.

What Enflame's gcushare device plugin does at Allocate, done here by the node agent: turn DRS
on for the GCU, list its instances, create one of the container's profile, and find the new
instance as the one of that profile the second listing adds (efsmi prints no id on creation);
the container gets ``TOPS_VISIBLE_DEVICES=DRS-<instance uuid>``. When the pod has ended the
instance is destroyed, and DRS turned off on a GCU left without instances (as Enflame's
plugin does on pod deletion).

Why a state file per container (``<drs_state_dir>/<pod uid>_<container>.json``): efsmi
cannot name an instance after its pod, and the release hook may be given no record (the agent
stopped while Allocate ran). The file is written *before* the instance is created, with the
GCU's instances at that moment, and completed after, so a release always finds what may have
been cut: the recorded instances, the one the file names, or else the instances of that
profile that appeared since and no other container's file claims. Allocate and release run
one at a time on the vendor thread, so no other creation can happen between the two
listings. A second Allocate of the same container (kubelet allocates again after a restart)
reuses the instance its file names, or destroys it first when the assignment changed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from xpushare_others.enflame.efsmi import Efsmi, EfsmiError, Instance

if TYPE_CHECKING:
    from xpushare.models import PodRef, ReleaseRequest
    from xpushare_others.enflame.config import EnflameConfig

#: Release-record keys (``ContainerAllocation.record``).
GCU_KEY: Final = "gcu"
INSTANCE_KEY: Final = "instance"
UUID_KEY: Final = "uuid"
PROFILE_KEY: Final = "profile"
#: Bytes of one state file that are read: a few ids.
MAX_STATE: Final = 16 << 10
#: Characters of a pod uid or container name kept in a file name (Kubernetes bounds both).
_SAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, slots=True)
class Cut:
    """The instance one container got."""

    gcu: int
    profile: str
    instance: str
    uuid: str

    def record(self) -> dict[str, str]:
        return {
            GCU_KEY: str(self.gcu),
            PROFILE_KEY: self.profile,
            INSTANCE_KEY: self.instance,
            UUID_KEY: self.uuid,
        }


def efsmi(config: EnflameConfig) -> Efsmi:
    return Efsmi(config.efsmi_path, config.efsmi_timeout_s)


def pod_key(pod: PodRef) -> str:
    """What names a pod's state files: its uid, or namespace/name where the API gave none."""
    return pod.uid or str(pod)


def state_name(pod_uid: str, container: str) -> str:
    return f"{_SAFE.sub('_', pod_uid[:64])}_{_SAFE.sub('_', container[:63])}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_STATE + 1)
    except FileNotFoundError:
        return None
    if len(raw) > MAX_STATE:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(path)


def _claimed(directory: Path, skip: Path) -> set[tuple[int, str]]:
    """(GCU, instance id) of every other container's completed state file."""
    out: set[tuple[int, str]] = set()
    for path in directory.glob("*.json"):
        data = _read(path) if path != skip else None
        if data and isinstance(data.get(INSTANCE_KEY), str) and isinstance(data.get(GCU_KEY), int):
            out.add((data[GCU_KEY], data[INSTANCE_KEY]))
    return out


def cut(
    config: EnflameConfig, who: str, pod_uid: str, container: str, gcu: int, profile: str, pid: str
) -> Cut:
    """The DRS instance of *profile* (Enflame's id *pid*) on GCU *gcu* for this container."""
    tool = efsmi(config)
    path = Path(config.drs_state_dir) / state_name(pod_uid, container)
    try:
        known = _read(path) or {}
        kept = known.get(INSTANCE_KEY)
        if isinstance(kept, str) and isinstance(known.get(GCU_KEY), int):
            was: int = known[GCU_KEY]
            alive = {i.id: i for i in tool.instances(was)}
            if kept in alive:
                if was == gcu and known.get(PROFILE_KEY) == profile:
                    return Cut(gcu, profile, kept, alive[kept].uuid)
                # This container's instance of an earlier assignment: no longer its own.
                tool.destroy(was, kept)
        tool.drs_on(gcu)
        before = tool.instances(gcu)
        _write(path, {GCU_KEY: gcu, PROFILE_KEY: profile, "before": sorted(i.id for i in before)})
        tool.create(gcu, pid)
        seen = {i.id for i in before}
        new = [i for i in tool.instances(gcu) if i.profile == profile and i.id not in seen]
        if len(new) != 1:
            raise EfsmiError(
                f"after creating a {profile} instance on GCU {gcu}, efsmi -L lists "
                f"{len(new)} new {profile} instances instead of one"
            )
        made = Cut(gcu, profile, new[0].id, new[0].uuid)
        _write(path, {**made.record(), GCU_KEY: gcu, "before": sorted(seen)})
        return made
    except (EfsmiError, OSError) as exc:
        raise RuntimeError(
            f"{who}: cutting the DRS instance {profile} on Enflame GCU {gcu} failed: {exc}"
        ) from exc


def _targets(
    tool: Efsmi, directory: Path, path: Path, records: list[dict[str, str]]
) -> tuple[set[int], set[tuple[int, str]]]:
    """(GCU, instance id) of every instance a container may hold: those its Allocates
    recorded, and the one its state file names (or, where Allocate stopped between creating
    and noting it, the instances of its profile that appeared since its first listing and no
    other container's file claims), and every GCU it touched."""
    out = {
        (int(r[GCU_KEY]), r[INSTANCE_KEY])
        for r in records
        if r.get(GCU_KEY, "").isdigit() and len(r[GCU_KEY]) <= 4 and r.get(INSTANCE_KEY)
    }
    state = _read(path)
    if not state or not isinstance(state.get(GCU_KEY), int):
        return {g for g, _ in out}, out
    gcu: int = state[GCU_KEY]
    if isinstance(state.get(INSTANCE_KEY), str):
        out.add((gcu, state[INSTANCE_KEY]))
    else:
        before = set(state.get("before") or ())
        taken = _claimed(directory, path)
        alive: list[Instance] = tool.instances(gcu)
        out |= {
            (gcu, i.id)
            for i in alive
            if i.profile == state.get(PROFILE_KEY)
            and i.id not in before
            and (gcu, i.id) not in taken
        }
    return {gcu} | {g for g, _ in out}, out


def release(config: EnflameConfig, request: ReleaseRequest) -> None:
    """Destroy the DRS instances of an ended pod's containers (repeatable)."""
    tool = efsmi(config)
    directory = Path(config.drs_state_dir)
    records: dict[str, list[dict[str, str]]] = {}
    for c in request.containers:  # a container allocated again appears more than once
        records.setdefault(c.container, []).extend([c.record] if c.record else [])
    emptied: set[int] = set()
    for container, recorded in sorted(records.items()):
        path = directory / state_name(pod_key(request.pod), container)
        try:
            touched, targets = _targets(tool, directory, path, recorded)
            for gcu in sorted(touched):
                alive = {i.id for i in tool.instances(gcu)}
                for iid in sorted(i for g, i in targets if g == gcu and i in alive):
                    tool.destroy(gcu, iid)
                emptied.add(gcu)
            path.unlink(missing_ok=True)
        except (EfsmiError, OSError) as exc:
            raise RuntimeError(
                f"pod {request.pod} on node {request.node}, container {container!r}: "
                f"destroying its Enflame DRS instance failed (retried later): {exc}"
            ) from exc
    for gcu in sorted(emptied):
        try:
            if not tool.instances(gcu):
                tool.drs_off(gcu)
        except EfsmiError as exc:
            raise RuntimeError(
                f"pod {request.pod} on node {request.node}: turning DRS off on Enflame GCU "
                f"{gcu}, left without instances, failed (retried later): {exc}"
            ) from exc

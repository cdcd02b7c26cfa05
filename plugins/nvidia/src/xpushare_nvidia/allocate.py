"""Allocate: what one container gets for its slices of NVIDIA GPUs.

Why three paths:

* **Shared slices** are limited inside the container by HAMi-core (``libvgpu.so``), which
  reads its limits from the environment and keeps per-container accounting in a shared
  file (research/hami-protocol.md §6.4 and §7.1). The container gets the limits, the library
  and the preload file that makes every process load it, and its own cache directory.
* **Whole GPUs held exclusively** need no limits: HAMi-core would only cost a little speed,
  so the container gets the devices and nothing else.
* **MIG slices** are isolated by the hardware, and no HAMi-core is given (HAMi does the
  same, §5.4). On a GPU in dynamic ``mig`` mode the slice names a profile and a start
  (``"3g.40gb@4"``): the instance is created there now (:mod:`xpushare_nvidia.dynamic`) and
  destroyed by :func:`release`. On a GPU carved in advance the container gets one free
  existing instance of the booked profile.
* **GPUs in exclusive mode** are given whole, like exclusive slices.

Every variable and mount is listed in README.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from xpushare.models import (
    AdmissionGuard,
    AllocateRequest,
    ContainerAllocation,
    Device,
    DeviceSlice,
    Mount,
    PodRef,
    ReleaseRequest,
)
from xpushare.scheduling.partitions import parse_slot
from xpushare_nvidia import dynamic, mig, modes
from xpushare_nvidia.calls import running_processes
from xpushare_nvidia.journal import Journal, done, instance_of, intent
from xpushare_nvidia.library import GEOMETRY_KEY, MIG_KEY

if TYPE_CHECKING:
    from xpushare_nvidia.config import HamiCoreConfig, NvidiaConfig
    from xpushare_nvidia.library import Nvml

log = logging.getLogger(__name__)

#: File name of the accounting file in a container's cache directory. HAMi's plugin uses a
#: random name; one fixed name per directory is enough, since the directory is the
#: container's own and is emptied at every Allocate.
CACHE_FILE: Final = "vgpu.cache"
#: Sub-directory of the HAMi-core directory with one cache directory per container.
CONTAINERS_DIR: Final = "containers"
#: Sibling of it where the node agent notes which pod a cache directory belongs to; out of
#: the containers' reach, so a container cannot relabel its own usage.
META_DIR: Final = "xpushare-meta"

#: Keys of the release record (ContainerAllocation.record): the cache directory's name, and
#: the MIG instances handed out (a later dynamic-MIG release destroys what it names).
RECORD_CACHE: Final = "hami_core_dir"
RECORD_MIG: Final = "mig_instances"
#: Where the preload file is mounted: the dynamic loader reads it before any program runs.
PRELOAD_TARGET: Final = "/etc/ld.so.preload"
#: The preload file on the node (next to the library).
PRELOAD_FILE: Final = "ld.so.preload"

#: Variables that switch HAMi-core's limits off or around when a pod sets them itself
#: (research/hami-protocol.md §6.4, §7.1): the limits and the accounting file Allocate sets,
#: the library HAMi-core loads, HAMi's switch for the preload, and the visible devices.
GUARDED_ENV: Final = (
    "CUDA_DISABLE_CONTROL",
    "CUDA_DEVICE_MEMORY_LIMIT*",
    "CUDA_DEVICE_SM_LIMIT*",
    "CUDA_DEVICE_MEMORY_SHARED_CACHE",
    "CUDA_OVERSUBSCRIBE",
    "CUDA_REDIRECT",
    "GPU_CORE_UTILIZATION_POLICY",
    "NVIDIA_VISIBLE_DEVICES",
)
#: The driver's device nodes: /dev/nvidia0..N, nvidiactl, nvidia-uvm(-tools), nvidia-modeset
#: and the MIG capabilities under /dev/nvidia-caps.
DEVICE_NODES: Final = "/dev/nvidia*"


def admission_guard(config: NvidiaConfig) -> AdmissionGuard:
    """What the webhook must refuse so that the mounts of :func:`_hami_core` hold: a volume
    over the preload file or HAMi-core's directory in a sharing container, a hostPath of
    that directory on the node, and the device nodes in privileged pods without a GPU."""
    hc = config.hami_core
    return AdmissionGuard(
        env=GUARDED_ENV,
        container_paths=(*((PRELOAD_TARGET,) if hc.preload else ()), hc.container_dir),
        host_paths=(hc.host_dir,),
        device_paths=(DEVICE_NODES,),
    )


#: Kubernetes container names are DNS labels (RFC 1123); checked because the name becomes a
#: directory name on the node.
_CONTAINER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_POD_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$")

_OWNERS_KEY: Final = "mig_owners"


class AllocationRefused(RuntimeError):
    """The container cannot be given its slices; the message names pod, GPU and remedy."""


@dataclass(frozen=True)
class _Owner:
    pod_uid: str
    container: str
    since: float


def allocate(nvml: Nvml, config: NvidiaConfig, request: AllocateRequest) -> ContainerAllocation:
    who = f"container {request.container!r} of pod {request.pod}"
    devices = {d.id: d for d in request.devices}
    slices = sorted(request.slices, key=lambda s: _index(s, devices))
    if not slices:
        return ContainerAllocation()
    partitioned = [s for s in slices if s.partition is not None]
    if partitioned and len(partitioned) != len(slices):
        raise AllocationRefused(
            f"{who}: MIG instances and shared GPUs in one container are not supported "
            "(HAMi-core cannot limit a MIG device); ask for one or the other"
        )
    for piece in slices:
        device = devices.get(piece.device_id)
        if piece.partition is None and device is not None and device.mode == mig.MIG_MODE:
            raise AllocationRefused(
                f"{who}: GPU {piece.device_id} is in MIG mode and cannot be given whole or "
                "shared; the pod must ask for a MIG profile. This is a scheduling error: "
                "report it with the pod's xpushare.io assignment annotation."
            )
    if partitioned:
        if all(parse_slot(s.partition or "") is not None for s in slices):
            instances = _create_instances(nvml, config, request, slices, who)
        else:
            instances = _mig_instances(nvml, request, slices, who)
        visible = _visible(config, instances, {})
        return visible.model_copy(update={"record": {RECORD_MIG: ",".join(instances)[:512]}})
    ids = [s.device_id for s in slices]
    whole = [devices.get(s.device_id) for s in slices]
    if all(s.exclusive for s in slices) or all(
        d is not None and d.mode == modes.EXCLUSIVE for d in whole
    ):
        return _visible(config, ids, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    return _hami_core(config, request, slices, ids, who)


def _index(piece: DeviceSlice, devices: dict[str, Device]) -> tuple[int, str]:
    device = devices.get(piece.device_id)
    return (device.index if device is not None else piece.index, piece.device_id)


def _visible(config: NvidiaConfig, ids: list[str], envs: dict[str, str]) -> ContainerAllocation:
    if config.device_list_strategy == "cdi":
        return ContainerAllocation(
            envs=envs, cdi_devices=tuple(f"{config.cdi_kind}={i}" for i in ids)
        )
    return ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(ids), **envs})


# ---------------------------------------------------------------------------------------
# Shared GPUs: HAMi-core
# ---------------------------------------------------------------------------------------


def _hami_core(
    config: NvidiaConfig,
    request: AllocateRequest,
    slices: list[DeviceSlice],
    ids: list[str],
    who: str,
) -> ContainerAllocation:
    hc = config.hami_core
    directory = _container_dir_name(request, who)
    _prepare_node(hc, request, directory, who)
    # Limits are numbered by CUDA device index inside the container. The slices are in NVML
    # (PCI bus) order and CUDA is told to enumerate in that order too, so index i of both
    # is the same GPU (by default CUDA puts the fastest GPU first).
    envs = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    for i, piece in enumerate(slices):
        # HAMi-core reads a suffix "m" as MiB (research/hami-protocol.md §7.1).
        envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{piece.memory_mib}m"
        envs[f"CUDA_DEVICE_SM_LIMIT_{i}"] = str(piece.compute_percent)
    # The unsuffixed limit is what HAMi's own plugin sets (the first device's); HAMi-core
    # uses it for devices without a suffixed one.
    envs["CUDA_DEVICE_SM_LIMIT"] = str(slices[0].compute_percent)
    envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{hc.container_dir}/{CACHE_FILE}"
    if hc.log_level is not None:
        envs["LIBCUDA_LOG_LEVEL"] = str(hc.log_level)
    if hc.core_policy != "default":
        envs["GPU_CORE_UTILIZATION_POLICY"] = hc.core_policy
    mounts = [
        Mount(
            host_path=f"{hc.host_dir}/{CONTAINERS_DIR}/{directory}",
            container_path=hc.container_dir,
            read_only=False,
        ),
        Mount(
            host_path=f"{hc.host_dir}/{hc.library}",
            container_path=f"{hc.container_dir}/{hc.library}",
            read_only=True,
        ),
        Mount(host_path=hc.lock_dir, container_path=hc.lock_dir, read_only=False),
    ]
    if hc.preload:
        mounts.append(
            Mount(
                host_path=f"{hc.host_dir}/{PRELOAD_FILE}",
                container_path=PRELOAD_TARGET,
                read_only=True,
            )
        )
    visible = _visible(config, ids, envs)
    return visible.model_copy(update={"mounts": tuple(mounts), "record": {RECORD_CACHE: directory}})


def release(nvml: Nvml | None, config: NvidiaConfig, request: ReleaseRequest) -> None:
    """Free what Allocate made for an ended pod: each container's HAMi-core cache directory
    and owner file, and the pod's hold on MIG instances. Repeatable: what is gone is skipped.

    The names are derived again from the pod's uid and the container's name (as Allocate
    made them), so a container whose record was never kept is freed all the same.
    """
    root = Path(config.hami_core.agent_path)
    for container in sorted({c.container for c in request.containers}):
        who = f"container {container!r} of pod {request.pod}"
        try:
            directory = _dir_name(request.pod, container, who)
        except AllocationRefused:
            continue  # Allocate refused this name: it created nothing under it
        shutil.rmtree(root / CONTAINERS_DIR / directory, ignore_errors=False, onerror=_gone_ok)
        (root / META_DIR / f"{directory}.json").unlink(missing_ok=True)
    _release_instances(nvml, config, request)
    if nvml is not None:
        owners: dict[str, _Owner] = nvml.extra.get(_OWNERS_KEY, {})
        me = request.pod.uid or str(request.pod)
        for instance in [u for u, o in owners.items() if o.pod_uid == me]:
            del owners[instance]


def _gone_ok(function: object, path: str, exc_info: object) -> None:
    error = exc_info[1] if isinstance(exc_info, tuple) else exc_info
    if not isinstance(error, FileNotFoundError):
        raise OSError(f"vendor nvidia: cannot remove {path}: {error}") from None


def _container_dir_name(request: AllocateRequest, who: str) -> str:
    return _dir_name(request.pod, request.container, who)


def _dir_name(pod: PodRef, container: str, who: str) -> str:
    if not _CONTAINER_NAME.match(container):
        raise AllocationRefused(f"{who}: container name is not a DNS label")
    uid = pod.uid or f"{pod.namespace}.{pod.name}"
    if not _POD_UID.match(uid) or "_" in uid or ".." in uid:
        raise AllocationRefused(f"{who}: pod UID {uid!r} cannot name a directory")
    return f"{uid}_{container}"


def _prepare_node(hc: HamiCoreConfig, request: AllocateRequest, directory: str, who: str) -> None:
    """The node-side files: library check, preload file, a fresh cache dir, its owner."""
    root = Path(hc.agent_path)
    library = root / hc.library
    if not library.is_file():
        message = (
            f"HAMi-core library {library} is missing on node {request.node}, so the limits "
            f"of {who} would not be enforced. Install HAMi-core's libvgpu.so there (the "
            "xpushare node image does this), or set hami_core.host_dir/agent_dir."
        )
        if hc.require_library:
            raise AllocationRefused(message)
        log.warning("vendor nvidia: %s", message)
    try:
        if hc.preload:
            _write_if_changed(root / PRELOAD_FILE, f"{hc.container_dir}/{hc.library}\n")
        cache = root / CONTAINERS_DIR / directory
        # A retried Allocate must not inherit the accounting of an earlier attempt.
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        # HAMi-core runs as the container's user, whoever that is.
        cache.chmod(0o777)
        meta = root / META_DIR
        meta.mkdir(exist_ok=True)
        _write_if_changed(
            meta / f"{directory}.json",
            json.dumps(
                {
                    "namespace": request.pod.namespace,
                    "pod": request.pod.name,
                    "uid": request.pod.uid,
                    "container": request.container,
                    # Which GPUs it shares, so a GPU's mode is not switched under it.
                    "devices": sorted({s.device_id for s in request.slices}),
                },
                sort_keys=True,
            ),
        )
    except OSError as exc:
        raise AllocationRefused(
            f"{who}: cannot prepare HAMi-core files under {root} on node {request.node}: "
            f"{exc}. The node agent needs that directory mounted read-write."
        ) from exc


def _write_if_changed(path: Path, content: str) -> None:
    try:
        if path.read_text() == content:
            return
    except OSError:
        pass
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(content)
    partial.chmod(0o644)
    partial.replace(path)


# ---------------------------------------------------------------------------------------
# MIG instances
# ---------------------------------------------------------------------------------------


def _mig_instances(
    nvml: Nvml, request: AllocateRequest, slices: list[DeviceSlice], who: str
) -> list[str]:
    """One instance per slice: this container's own, else a free idle one of the profile.

    Which pod holds which instance is remembered here, in memory. After a restart of the
    node agent that memory is empty, so an instance is handed out only if no process runs
    on it; the scheduler's ledger guarantees a free one exists for each booked slice.
    """
    owners: dict[str, _Owner] = nvml.extra.setdefault(_OWNERS_KEY, {})
    states: dict[str, mig.MigState] = nvml.extra.get(MIG_KEY, {})
    me = (request.pod.uid or str(request.pod), request.container)
    chosen: list[str] = []
    for piece in slices:
        state = states.get(piece.device_id)
        if state is None:
            raise AllocationRefused(
                f"{who}: GPU {piece.device_id} is not in MIG mode on node {request.node} "
                "(any more); the pod was placed on an outdated inventory. Delete the pod to "
                "have it placed again."
            )
        candidates = [
            i for i in state.instances if i.profile == piece.partition and i.uuid not in chosen
        ]
        pick = _pick(candidates, owners, me)
        if pick is None:
            raise AllocationRefused(
                f"{who}: no free MIG instance of profile {piece.partition} on GPU "
                f"{piece.device_id} (node {request.node}): the instances there are in use. "
                "Check `nvidia-smi mig -lgi` against the pods on this node."
            )
        owners[pick.uuid] = _Owner(me[0], me[1], time.monotonic())
        chosen.append(pick.uuid)
    return chosen


def _pick(
    candidates: list[mig.MigInstance], owners: dict[str, _Owner], me: tuple[str, str]
) -> mig.MigInstance | None:
    for instance in candidates:
        owner = owners.get(instance.uuid)
        if owner is not None and (owner.pod_uid, owner.container) == me:
            return instance  # kubelet retried this container's Allocate
    unowned = [i for i in candidates if i.uuid not in owners and _idle(i)]
    if unowned:
        return unowned[0]
    # Every instance has an owner: some owners must be gone (the scheduler booked a free
    # one). Take the longest-held instance that runs nothing.
    for instance in sorted(candidates, key=lambda i: owners[i.uuid].since):
        if _idle(instance):
            old = owners[instance.uuid]
            log.info(
                "vendor nvidia: MIG instance %s of finished container %s/%s reused",
                instance.uuid,
                old.pod_uid,
                old.container,
            )
            return instance
    return None


def _idle(instance: mig.MigInstance) -> bool:
    # Unknown (no variant of the call answers) is not idle: reusing an instance that still
    # runs a process would put two containers on it.
    procs = running_processes(instance.handle)
    return procs is not None and not procs


# ---------------------------------------------------------------------------------------
# Dynamic MIG: instances created at Allocate, destroyed at release
# ---------------------------------------------------------------------------------------


def _create_instances(
    nvml: Nvml, config: NvidiaConfig, request: AllocateRequest, slices: list[DeviceSlice], who: str
) -> list[str]:
    """One new MIG instance per slice, at the profile and start the scheduler booked.

    A retried Allocate of the same container gets the instances its first attempt made.
    Each instance is in the journal as an intent before it is created, so no failure
    between the two leaves an instance nobody will destroy.
    """
    journal = Journal(Path(config.journal_dir))
    name = _container_dir_name(request, who)
    _note_owner(config, request, name, who)
    entries = journal.read(name)
    geometry: dict[str, tuple[dynamic.GiProfile, ...]] = nvml.extra.get(GEOMETRY_KEY, {})
    out: list[str] = []
    for piece in slices:
        profile_name, start = parse_slot(piece.partition or "") or ("", -1)
        profiles = geometry.get(piece.device_id, ())
        handle = nvml.handles.get(piece.device_id)
        profile = next((p for p in profiles if p.name == profile_name), None)
        if handle is None or profile is None or start not in profile.starts:
            raise AllocationRefused(
                f"{who}: GPU {piece.device_id} on node {request.node} offers no MIG instance "
                f"{piece.partition} (it is not in dynamic mig mode, or lacks that profile "
                "or placement); the pod was placed on an outdated inventory. Delete the pod "
                "to have it placed again."
            )
        here = (piece.device_id, profile.name, start)
        mine = next(
            (
                i
                for i in map(instance_of, entries)
                if i is not None and (i.gpu, i.profile, i.start) == here
            ),
            None,
        )
        if mine is not None and _still(handle, mine, profile):
            out.append(mine.uuid)  # kubelet retried this container's Allocate
            continue
        entries = [e for e in entries if (e["gpu"], e["profile"], e["start"]) != here]
        _clear_way(journal, handle, piece.device_id, profile, start, profiles, who)
        entries.append(intent(*here))
        journal.write(name, entries)
        try:
            created = dynamic.create(handle, piece.device_id, profile, start)
        except dynamic.MigError as exc:
            journal.write(name, entries[:-1])
            raise AllocationRefused(
                f"{who}: {exc}. Check `nvidia-smi mig -lgi -i {piece.index}` on node "
                f"{request.node}."
            ) from exc
        entries[-1] = done(created)
        journal.write(name, entries)
        out.append(created.uuid)
    return out


def _note_owner(config: NvidiaConfig, request: AllocateRequest, name: str, who: str) -> None:
    """Who the container is, next to HAMi-core's owner files: the monitor labels the MIG
    instance's usage with it, and a mode switch waits for it (:func:`hami_core_holders`)."""
    meta = Path(config.hami_core.agent_path) / META_DIR
    try:
        meta.mkdir(parents=True, exist_ok=True)
        _write_if_changed(
            meta / f"{name}.json",
            json.dumps(
                {
                    "namespace": request.pod.namespace,
                    "pod": request.pod.name,
                    "uid": request.pod.uid,
                    "container": request.container,
                    "devices": sorted({s.device_id for s in request.slices}),
                },
                sort_keys=True,
            ),
        )
    except OSError as exc:
        raise AllocationRefused(
            f"{who}: cannot note the MIG instance's owner under {meta} on node {request.node}: "
            f"{exc}. The node agent needs that directory mounted read-write."
        ) from exc


def _still(handle: object, instance: dynamic.Instance, profile: dynamic.GiProfile) -> bool:
    found = dynamic.find(handle, instance.gi)
    return (
        found is not None
        and found[:2] == (profile.id, instance.start)
        and dynamic.mig_uuid(handle, instance.gi, instance.ci) == instance.uuid
    )


def _clear_way(
    journal: Journal,
    handle: object,
    gpu: str,
    profile: dynamic.GiProfile,
    start: int,
    profiles: tuple[dynamic.GiProfile, ...],
    who: str,
) -> None:
    """Destroy idle instances in the slices the new one needs (left by pods whose release
    has not run yet: the scheduler booked these slices for this container alone); refuse
    if one of them runs a process."""
    want = ((1 << profile.memory_slices) - 1) << start
    for other, other_start, gi_id, _ in dynamic.instances_at(handle, profiles):
        if not want & (((1 << other.memory_slices) - 1) << other_start):
            continue
        devices = [d for d in dynamic.mig_devices(handle) if d[0] == gi_id]
        ci, uuid = (devices[0][1], devices[0][2]) if devices else (0, "")
        stale = dynamic.Instance(gpu, other.name, other_start, gi_id, ci, uuid)
        if not dynamic.destroy(handle, stale, {p.name: p for p in profiles}):
            raise AllocationRefused(
                f"{who}: MIG instance {other.name} at slice {other_start} (GPU instance "
                f"{gi_id}) on GPU {gpu} still runs a process and overlaps the instance "
                f"{profile.name}@{start} this container was given; retried when it ends"
            )


def _release_instances(nvml: Nvml | None, config: NvidiaConfig, request: ReleaseRequest) -> None:
    """Destroy the MIG instances the journal lists for the pod's containers; raise (to be
    called again later) while one of them runs a process or NVML is not loaded."""
    journal = Journal(Path(config.journal_dir))
    busy: list[str] = []
    for container in sorted({c.container for c in request.containers}):
        try:
            name = _dir_name(request.pod, container, container)
        except AllocationRefused:
            continue
        entries = journal.read(name)
        if not entries:
            continue
        if nvml is None:
            raise AllocationRefused(
                f"vendor nvidia: MIG instances of pod {request.pod} cannot be destroyed: NVML "
                "is not loaded"
            )
        left = []
        for entry in entries:
            handle = nvml.handles.get(entry["gpu"])
            profiles = nvml.extra.get(GEOMETRY_KEY, {}).get(entry["gpu"], ())
            if handle is None:
                left.append(entry)  # the GPU is gone from NVML for now: try again later
                busy.append(f"{entry['profile']}@{entry['start']} on GPU {entry['gpu']} (not seen)")
                continue
            instance = instance_of(entry) or _intended(journal, name, handle, entry, profiles)
            if instance is None:
                continue
            if not dynamic.destroy(handle, instance, {p.name: p for p in profiles}):
                left.append(entry)
                busy.append(instance.uuid)
        journal.write(name, left)
    if busy:
        raise AllocationRefused(
            f"vendor nvidia: MIG devices {', '.join(busy)} of ended pod {request.pod} are still "
            "running processes or on a GPU NVML does not show now; they are destroyed when "
            "that ends (the release is retried)"
        )


def _intended(
    journal: Journal,
    name: str,
    handle: object,
    entry: dict[str, object],
    profiles: tuple[dynamic.GiProfile, ...],
) -> dynamic.Instance | None:
    """The instance an unfinished Allocate may have created at the entry's place, unless
    another container's journal claims it (a later pod was given the same place)."""
    place = (entry["gpu"], entry["profile"], entry["start"])
    for other in journal.names():
        if other != name and any(
            (e["gpu"], e["profile"], e["start"]) == place for e in journal.read(other)
        ):
            return None
    for profile, start, gi_id, _ in dynamic.instances_at(handle, profiles):
        if (profile.name, start) == place[1:]:
            devices = [d for d in dynamic.mig_devices(handle) if d[0] == gi_id]
            ci, uuid = (devices[0][1], devices[0][2]) if devices else (0, "")
            return dynamic.Instance(str(place[0]), profile.name, start, gi_id, ci, uuid)
    return None


def mig_holders(config: NvidiaConfig, gpu: str) -> list[str]:
    """Containers whose MIG instances on *gpu* the journal still lists."""
    return Journal(Path(config.journal_dir)).on_gpu(gpu)


#: Owner files read at most when asking who shares a GPU (a node runs at most a few hundred
#: containers; the bound keeps a full directory from stalling detection).
MAX_OWNER_FILES: Final = 4096


def hami_core_holders(config: NvidiaConfig, gpu: str) -> list[str]:
    """Containers given a HAMi-core share of *gpu* that are not released yet."""
    meta = Path(config.hami_core.agent_path) / META_DIR
    out: list[str] = []
    try:
        files = sorted(meta.glob("*.json"))[:MAX_OWNER_FILES]
    except OSError:
        return out
    for path in files:
        try:
            data = json.loads(path.read_bytes()[:4096])
        except (OSError, ValueError):
            continue
        devices = data.get("devices") if isinstance(data, dict) else None
        if isinstance(devices, list) and gpu in devices:
            out.append(path.stem)
    return out

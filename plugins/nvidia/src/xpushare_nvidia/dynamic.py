"""Dynamic MIG: the GPU's instance geometry from NVML, and instances created and destroyed.

Why: a GPU in ``mig`` mode is not carved in advance. Detection publishes the GPU instance
profiles NVML offers with their possible placements; the scheduler picks a profile and a
start for each container (:mod:`xpushare.scheduling.partitions`, booked as
``"<profile>@<start>"``); Allocate creates that GPU instance and one compute instance that
takes all of it, and hands the container the MIG device that appears; the release hook
destroys it when the pod ends.

What was created is written down before and after creation in a journal on the node's disk
(:mod:`xpushare_nvidia.journal`), named after the pod's uid and the container, so that an
agent restart finds the instances it made: it destroys those of pods that ended (the node
agent's release ledger calls release again) and never one whose pod lives. An instance is
destroyed only when it is still the one recorded (same GPU instance id, profile, start and
MIG UUID: NVML reuses ids) and no process runs on it.

Every function here runs on the vendor's library thread.
"""

from __future__ import annotations

import ctypes
import logging
import math
from dataclasses import dataclass
from typing import Any, Final

from xpushare.models import PartitionProfile
from xpushare.models.device import MAX_SLICES
from xpushare.scheduling.partitions import dynamic_profile
from xpushare_nvidia.calls import is_missing, lost_codes, optional, running_processes, text
from xpushare_nvidia.lazy import pynvml

log = logging.getLogger(__name__)


def gi_profile_count() -> int:
    """NVML's GPU instance profile indices to ask about: ``NVML_GPU_INSTANCE_PROFILE_COUNT``
    (0x12 in nvml.h 13.x), or that number where pynvml predates it; read when asked, not at
    import (lazy.py)."""
    return int(getattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0x12))


#: The compute instance profile that takes a whole GPU instance of N compute slices
#: (``NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE``): one CI per GI, as HAMi and the GPU
#: operator's default MIG devices are.
CI_PROFILE_FOR_SLICES: Final = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
#: ``NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED``.
CI_ENGINE_SHARED: Final = 0
#: Placements asked for at most per profile (an A100's 1g has 7).
MAX_PLACEMENTS: Final = MAX_SLICES


class MigError(RuntimeError):
    """Creating or destroying a MIG instance failed; the message names GPU and instance."""


@dataclass(frozen=True)
class GiProfile:
    """One GPU instance profile of a GPU, as NVML reports it."""

    index: int  # NVML_GPU_INSTANCE_PROFILE_*
    id: int  # what creation takes
    name: str
    compute_slices: int
    memory_slices: int
    count: int
    sms: int
    memory_mib: int
    starts: tuple[int, ...]

    def partition(self, gpu_sms: int) -> PartitionProfile:
        """The inventory entry: compute percent as HAMi computes it (§5.4)."""
        share = (
            math.ceil(self.sms * 100 / gpu_sms)
            if gpu_sms > 0 and self.sms > 0
            else math.ceil(self.compute_slices * 100 / 7)
        )
        return dynamic_profile(
            self.name,
            memory_mib=self.memory_mib,
            compute_percent=share,
            count=self.count,
            compute_slices=self.compute_slices,
            memory_slices=self.memory_slices,
            starts=self.starts,
        )


def read_profiles(handle: Any, allow: tuple[str, ...] = ()) -> tuple[GiProfile, ...]:
    """The GPU instance profiles of a GPU in MIG mode with their placements.

    Profiles NVML does not support on this GPU are skipped; *allow*, when given, keeps only
    the profiles named in it (HAMi's ``migProfileAllowlist``).
    """
    found: list[GiProfile] = []
    for index in range(gi_profile_count()):
        info = _profile_info(handle, index)
        if info is None or int(info.instanceCount) == 0:
            continue
        name = _profile_name(info)
        if allow and name not in allow:
            continue
        starts, size = _placements(handle, int(info.id))
        if not starts or size <= 0:
            continue
        found.append(
            GiProfile(
                index=index,
                id=int(info.id),
                name=name,
                compute_slices=int(info.sliceCount),
                memory_slices=size,
                count=int(info.instanceCount),
                sms=int(info.multiprocessorCount),
                memory_mib=int(info.memorySizeMB),
                starts=starts,
            )
        )
    return tuple(found)


def _profile_info(handle: Any, index: int) -> Any:
    try:
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, 2)
    except pynvml.NVMLError as exc:
        if exc.value in lost_codes():
            raise
        if not is_missing(exc):
            return None  # a profile this GPU does not have
    # Drivers before R470 lack the V call: the v1 structure has no name.
    return optional(
        "nvmlDeviceGetGpuInstanceProfileInfo",
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
        handle,
        index,
        1,
    )


def _profile_name(info: Any) -> str:
    raw = text(getattr(info, "name", b"") or b"")
    if raw.upper().startswith("MIG "):
        raw = raw[4:].strip()
    if raw:
        return raw.lower()[:64]
    # NVML's naming: compute slices, then memory rounded to whole GB.
    return f"{int(info.sliceCount)}g.{round(int(info.memorySizeMB) / 1024)}gb"


def _placements(handle: Any, profile_id: int) -> tuple[tuple[int, ...], int]:
    array = (pynvml.c_nvmlGpuInstancePlacement_t * MAX_PLACEMENTS)()
    count = ctypes.c_uint(MAX_PLACEMENTS)
    try:
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            handle, profile_id, array, ctypes.byref(count)
        )
    except pynvml.NVMLError as exc:
        if exc.value in lost_codes():
            raise
        log.warning("vendor nvidia: placements of MIG profile %d unreadable: %s", profile_id, exc)
        return (), 0
    n = min(int(count.value), MAX_PLACEMENTS)
    sizes = {int(array[i].size) for i in range(n)}
    starts = tuple(
        sorted(
            int(array[i].start)
            for i in range(n)
            if int(array[i].start) + int(array[i].size) <= MAX_SLICES
        )
    )
    # One size per profile: NVML's placements of a profile all span its memory slices.
    return (starts, sizes.pop()) if len(sizes) == 1 else ((), 0)


# ---------------------------------------------------------------------------------------
# Instances
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """A GPU instance with its compute instance and MIG device, as created for a container."""

    gpu: str
    profile: str
    start: int
    gi: int
    ci: int
    uuid: str


def create(handle: Any, gpu: str, profile: GiProfile, start: int) -> Instance:
    """Create a GPU instance of *profile* at *start* and a compute instance filling it."""
    where = f"MIG {profile.name} at slice {start} on GPU {gpu}"
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start = start
    placement.size = profile.memory_slices
    try:
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            handle, profile.id, ctypes.byref(placement)
        )
    except pynvml.NVMLError as exc:
        raise MigError(f"cannot create {where}: {exc}") from exc
    ci: Any = None
    try:
        ci_profile = CI_PROFILE_FOR_SLICES.get(profile.compute_slices)
        if ci_profile is None:
            raise MigError(f"no compute instance profile takes {profile.compute_slices} slices")
        info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_profile, CI_ENGINE_SHARED)
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, int(info.id))
        gi_id = int(pynvml.nvmlGpuInstanceGetInfo(gi).id)
        ci_id = int(pynvml.nvmlComputeInstanceGetInfo(ci).id)
    except (pynvml.NVMLError, MigError) as exc:
        _undo(gi, ci, where)
        raise MigError(f"cannot create the compute instance of {where}: {exc}") from exc
    uuid = mig_uuid(handle, gi_id, ci_id)
    if uuid is None:
        _undo(gi, ci, where)
        raise MigError(f"{where} was created (GPU instance {gi_id}) but no MIG device shows it")
    log.info("vendor nvidia: created %s: GPU instance %d, MIG device %s", where, gi_id, uuid)
    return Instance(gpu=gpu, profile=profile.name, start=start, gi=gi_id, ci=ci_id, uuid=uuid)


def _undo(gi: Any, ci: Any, where: str) -> None:
    try:
        if ci is not None:
            pynvml.nvmlComputeInstanceDestroy(ci)
        pynvml.nvmlGpuInstanceDestroy(gi)
    except pynvml.NVMLError as exc:
        log.error("vendor nvidia: half-created %s could not be destroyed: %s", where, exc)


def mig_devices(handle: Any) -> list[tuple[int, int, str, Any]]:
    """(GPU instance id, compute instance id, UUID, handle) of each MIG device of the GPU."""
    out = []
    slots = optional(
        "nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle
    )
    for index in range(min(slots or 0, MAX_SLICES)):
        mig = optional(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
            handle,
            index,
        )
        if mig is None:
            continue
        gi = optional("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, mig)
        ci = optional("nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId, mig)
        uuid = optional("nvmlDeviceGetUUID(MIG)", pynvml.nvmlDeviceGetUUID, mig)
        if gi is not None and ci is not None and uuid:
            out.append((int(gi), int(ci), text(uuid), mig))
    return out


def mig_uuid(handle: Any, gi: int, ci: int) -> str | None:
    return next((u for g, c, u, _ in mig_devices(handle) if (g, c) == (gi, ci)), None)


def find(handle: Any, gi: int) -> tuple[int, int, Any] | None:
    """(profile id, start, GPU instance handle) of GPU instance *gi*, or ``None`` if gone."""
    try:
        instance = pynvml.nvmlDeviceGetGpuInstanceById(handle, gi)
        info = pynvml.nvmlGpuInstanceGetInfo(instance)
    except pynvml.NVMLError as exc:
        if exc.value in lost_codes():
            raise
        return None
    return int(info.profileId), int(info.placement.start), instance


def busy(handle: Any, gi: int, ci: int) -> bool:
    """Whether a process runs on MIG device (gi, ci); unknown counts as busy."""
    for g, c, _, mig in mig_devices(handle):
        if (g, c) == (gi, ci):
            procs = running_processes(mig)
            return procs is None or bool(procs)
    return False


def destroy(handle: Any, instance: Instance, profiles: dict[str, GiProfile]) -> bool:
    """Destroy *instance* if it is still the one recorded; ``False`` if it runs processes.

    Gone already, or replaced by another instance under the same id: nothing to do (True).
    """
    profile = profiles.get(instance.profile)
    found = find(handle, instance.gi)
    if found is None or profile is None:
        return True
    profile_id, start, gi = found
    current = mig_uuid(handle, instance.gi, instance.ci)
    if profile_id != profile.id or start != instance.start or current not in (None, instance.uuid):
        log.info(
            "vendor nvidia: GPU instance %d on GPU %s is not %s any more: left alone",
            instance.gi,
            instance.gpu,
            instance.uuid,
        )
        return True
    if busy(handle, instance.gi, instance.ci):
        return False
    where = f"MIG device {instance.uuid} (GPU instance {instance.gi} on GPU {instance.gpu})"
    try:
        if current is not None:
            ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, instance.ci)
            pynvml.nvmlComputeInstanceDestroy(ci)
        pynvml.nvmlGpuInstanceDestroy(gi)
    except pynvml.NVMLError as exc:
        if exc.value == pynvml.NVML_ERROR_IN_USE:
            return False
        raise MigError(f"cannot destroy {where}: {exc}") from exc
    log.info("vendor nvidia: destroyed %s", where)
    return True


def instances_at(
    handle: Any, profiles: tuple[GiProfile, ...]
) -> list[tuple[GiProfile, int, int, Any]]:
    """Every GPU instance of the GPU: (profile, start, id, handle)."""
    out = []
    for profile in profiles:
        array = (pynvml.c_nvmlGpuInstance_t * max(1, profile.count))()
        count = ctypes.c_uint(max(1, profile.count))
        try:
            pynvml.nvmlDeviceGetGpuInstances(handle, profile.id, array, ctypes.byref(count))
        except pynvml.NVMLError as exc:
            if exc.value in lost_codes():
                raise
            continue
        for i in range(min(int(count.value), profile.count)):
            info = pynvml.nvmlGpuInstanceGetInfo(array[i])
            out.append((profile, int(info.placement.start), int(info.id), array[i]))
    return out


def clear(handle: Any, gpu: str, profiles: tuple[GiProfile, ...]) -> bool:
    """Destroy every instance of an idle GPU (before it leaves MIG mode); ``False`` if one
    runs a process, in which case none is destroyed."""
    existing = instances_at(handle, profiles)
    devices = mig_devices(handle)
    for _, _, _, mig in devices:
        procs = running_processes(mig)
        if procs is None or procs:
            return False
    for _profile, _start, gi_id, gi in existing:
        for g, c, _, _ in devices:
            if g == gi_id:
                pynvml.nvmlComputeInstanceDestroy(
                    pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, c)
                )
        pynvml.nvmlGpuInstanceDestroy(gi)
        log.info("vendor nvidia: destroyed GPU instance %d on GPU %s (mode switch)", gi_id, gpu)
    return True

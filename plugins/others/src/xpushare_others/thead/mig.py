"""T-Head MIG through HGML: a PPU's mode, its instance geometry, instances made and unmade.

Why HGML's MIG calls: T-Head's MIG mirrors NVIDIA's (GPUStack's thead-mig.md: "its hgml and
ppu-smi mig interfaces mirror NVIDIA's NVML"), and GPUStack's ``binding/hgml`` drives it with
NVML's calls under ``hgml`` names and NVML's structs: ``hgmlDeviceGetMigMode``,
``hgmlDeviceGetGpuInstanceProfileInfoV`` (the v2 struct, the one with a name),
``hgmlDeviceGetGpuInstancePossiblePlacements_v2``, ``hgmlDeviceCreateGpuInstanceWithPlacement``,
``hgmlGpuInstanceGetInfo``, ``hgmlGpuInstanceGetComputeInstanceProfileInfo``,
``hgmlGpuInstanceCreateComputeInstance``, ``hgmlComputeInstanceGetInfo_v2``,
``hgmlDeviceGetGpuInstanceById``, ``hgmlGpuInstanceGetComputeInstanceById``,
``hgmlDeviceGetGpuInstances``, ``hgmlComputeInstanceDestroy``, ``hgmlGpuInstanceDestroy``.

GPUStack's rules, kept: profiles are the driver's, probed by index; a profile is offered only
with a name (``MIG 4g48gb`` is published as ``4g.48gb``) and with placements, whose span is
read from the driver, never computed; a partition is one GPU instance with one compute instance
filling it; the compute instance is destroyed before its GPU instance. The geometry itself (which
start a new instance takes) is the core's, :mod:`xpushare.scheduling.partitions`.

Every function here runs on the vendor's library thread.
"""

from __future__ import annotations

import ctypes
import logging
import math
import re
from ctypes import POINTER, Structure, byref, c_char, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from xpushare.models import PartitionProfile
from xpushare.models.device import MAX_SLICES
from xpushare.scheduling.partitions import dynamic_profile

if TYPE_CHECKING:
    # The library's base class, not thead.library's Hgml: that module imports this one's
    # signatures, and these functions use only what every NVML-shaped library has.
    from xpushare_others.common.nvml_shaped import NvmlApiLibrary as Hgml

log = logging.getLogger(__name__)

#: The device mode of a PPU in MIG mode, as NVIDIA's MIG GPUs are published.
MIG_MODE: Final = "mig"
#: GPU instance profile indices probed: NVML's ``NVML_GPU_INSTANCE_PROFILE_COUNT`` (0x12 in
#: nvml.h 13.x), which HGML's enumeration mirrors; the ids are sparse (GPUStack saw 3 and 5).
GI_PROFILE_COUNT: Final = 0x12
#: NVML's ``NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE`` indices by compute slices: the compute
#: instance that fills a GPU instance of N slices.
CI_PROFILE_FOR_SLICES: Final = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
#: ``NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED``.
CI_ENGINE_SHARED: Final = 0
#: NVML's return codes the MIG calls answer with, beyond success and not supported.
NOT_FOUND: Final = 6
IN_USE: Final = 19
#: ``MIG 4g48gb`` → ``4g.48gb``: T-Head spells the geometry without NVIDIA's separator.
_BARE: Final = re.compile(r"^([0-9]{1,3})g([0-9]{1,5})gb$")
_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9.+-]{0,63}$")

#: The MIG calls, all optional: an HGML without them serves its PPUs whole.
SIGNATURES: Final[dict[str, tuple[Any, ...]]] = {
    "hgmlDeviceGetMigMode": (c_void_p, POINTER(c_uint), POINTER(c_uint)),
    "hgmlDeviceGetGpuInstanceProfileInfoV": (c_void_p, c_uint, c_void_p),
    "hgmlDeviceGetGpuInstancePossiblePlacements_v2": (c_void_p, c_uint, c_void_p, POINTER(c_uint)),
    "hgmlDeviceCreateGpuInstanceWithPlacement": (c_void_p, c_uint, c_void_p, POINTER(c_void_p)),
    "hgmlGpuInstanceGetInfo": (c_void_p, c_void_p),
    "hgmlDeviceGetGpuInstanceById": (c_void_p, c_uint, POINTER(c_void_p)),
    "hgmlDeviceGetGpuInstances": (c_void_p, c_uint, POINTER(c_void_p), POINTER(c_uint)),
    "hgmlGpuInstanceGetComputeInstanceProfileInfo": (c_void_p, c_uint, c_uint, c_void_p),
    "hgmlGpuInstanceCreateComputeInstance": (c_void_p, c_uint, POINTER(c_void_p)),
    "hgmlComputeInstanceGetInfo_v2": (c_void_p, c_void_p),
    "hgmlGpuInstanceGetComputeInstanceById": (c_void_p, c_uint, POINTER(c_void_p)),
    "hgmlComputeInstanceDestroy": (c_void_p,),
    "hgmlGpuInstanceDestroy": (c_void_p,),
}


class Placement(Structure):
    _fields_ = [("start", c_uint), ("size", c_uint)]


class GiProfileInfoV2(Structure):
    """``hgmlGpuInstanceProfileInfo_v2_t`` (NVML's v2: 152 bytes, GPUStack's binding)."""

    _fields_ = [
        ("version", c_uint),
        ("id", c_uint),
        ("isP2pSupported", c_uint),
        ("sliceCount", c_uint),
        ("instanceCount", c_uint),
        ("multiprocessorCount", c_uint),
        ("copyEngineCount", c_uint),
        ("decoderCount", c_uint),
        ("encoderCount", c_uint),
        ("jpegCount", c_uint),
        ("ofaCount", c_uint),
        ("memorySizeMB", c_ulonglong),
        ("name", c_char * 96),
    ]


#: NVML's ``NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)``: size | version << 24.
GI_PROFILE_INFO_V2: Final = ctypes.sizeof(GiProfileInfoV2) | (2 << 24)


class GiInfo(Structure):
    _fields_ = [
        ("device", c_void_p),
        ("id", c_uint),
        ("profileId", c_uint),
        ("placement", Placement),
    ]


class CiProfileInfo(Structure):
    _fields_ = [
        ("id", c_uint),
        ("sliceCount", c_uint),
        ("instanceCount", c_uint),
        ("multiprocessorCount", c_uint),
        ("sharedCopyEngineCount", c_uint),
        ("sharedDecoderCount", c_uint),
        ("sharedEncoderCount", c_uint),
        ("sharedJpegCount", c_uint),
        ("sharedOfaCount", c_uint),
    ]


class CiInfo(Structure):
    _fields_ = [
        ("device", c_void_p),
        ("gpuInstance", c_void_p),
        ("id", c_uint),
        ("profileId", c_uint),
        ("placement", Placement),
    ]


class MigError(RuntimeError):
    """Creating or destroying a T-Head MIG instance failed; names the PPU and the instance."""


@dataclass(frozen=True)
class GiProfile:
    """One GPU instance profile of a PPU, as HGML reports it."""

    id: int
    name: str
    compute_slices: int
    memory_slices: int
    count: int
    memory_mib: int
    starts: tuple[int, ...]

    def partition(self, device_slices: int) -> PartitionProfile:
        share = math.ceil(self.compute_slices * 100 / max(1, device_slices))
        return dynamic_profile(
            self.name,
            memory_mib=self.memory_mib,
            compute_percent=share,
            count=self.count,
            compute_slices=self.compute_slices,
            memory_slices=self.memory_slices,
            starts=self.starts,
        )


def normalise(raw: str) -> str | None:
    """GPUStack's normalisation of a driver profile name (``MIG 4g48gb`` → ``4g.48gb``), or
    ``None`` where nothing usable remains (the profile is then not offered)."""
    name = raw.strip()
    if name.upper().startswith("MIG "):
        name = name[4:]
    name = "".join(name.split()).lower()
    bare = _BARE.match(name)
    if bare:
        name = f"{bare.group(1)}g.{bare.group(2)}gb"
    return name if _NAME.match(name) else None


def available(hgml: Hgml) -> bool:
    """Whether this HGML has every MIG call."""
    return all(name in hgml.fns for name in SIGNATURES)


def enabled(hgml: Hgml, handle: c_void_p, index: int) -> bool:
    current, pending = c_uint(), c_uint()
    ok = hgml.optional("hgmlDeviceGetMigMode", handle, byref(current), byref(pending), device=index)
    return ok and current.value == 1


def read_profiles(hgml: Hgml, handle: c_void_p, index: int) -> tuple[GiProfile, ...]:
    """The GPU instance profiles of PPU *index* with their placements (none: not offered)."""
    found: list[GiProfile] = []
    for probe in range(GI_PROFILE_COUNT):
        info = GiProfileInfoV2(version=GI_PROFILE_INFO_V2)
        fn = hgml.fns["hgmlDeviceGetGpuInstanceProfileInfoV"]
        if fn(handle, probe, byref(info)) != 0 or info.instanceCount == 0:
            continue  # a profile this PPU does not have
        raw = info.name.decode(errors="replace")
        name = normalise(raw)
        if name is None:
            log.warning(
                "vendor thead: PPU %d: GPU instance profile id %d has no usable name (%r); "
                "not offered",
                index,
                info.id,
                raw[:64],
            )
            continue
        starts, size = _placements(hgml, handle, index, int(info.id))
        if not starts:
            log.warning(
                "vendor thead: PPU %d: MIG profile %s has no legal placement; not offered",
                index,
                name,
            )
            continue
        found.append(
            GiProfile(
                id=int(info.id),
                name=name,
                compute_slices=int(info.sliceCount),
                memory_slices=size,
                count=int(info.instanceCount),
                memory_mib=int(info.memorySizeMB),
                starts=starts,
            )
        )
    return tuple(found)


def _placements(
    hgml: Hgml, handle: c_void_p, index: int, profile_id: int
) -> tuple[tuple[int, ...], int]:
    array = (Placement * MAX_SLICES)()
    count = c_uint(MAX_SLICES)
    hgml.call(
        "hgmlDeviceGetGpuInstancePossiblePlacements_v2",
        handle,
        profile_id,
        array,
        byref(count),
        device=index,
    )
    n = min(int(count.value), MAX_SLICES)
    sizes = {int(array[i].size) for i in range(n)}
    starts = tuple(
        sorted(
            int(array[i].start)
            for i in range(n)
            if int(array[i].start) + int(array[i].size) <= MAX_SLICES
        )
    )
    # One span per profile: a placement record spans the profile's memory slices.
    return (starts, sizes.pop()) if len(sizes) == 1 and min(sizes) > 0 else ((), 0)


# ---------------------------------------------------------------------------------------
# Instances
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """A GPU instance of a PPU with its one compute instance."""

    ppu: int
    profile: str
    start: int
    gi: int
    ci: int


def _code(hgml: Hgml, name: str, *args: Any) -> int:
    return int(hgml.fns[name](*args))


def create(hgml: Hgml, handle: c_void_p, ppu: int, profile: GiProfile, start: int) -> Instance:
    """A GPU instance of *profile* at *start* and a compute instance filling it."""
    where = f"MIG {profile.name} at slice {start} on PPU {ppu}"
    placement = Placement(start=start, size=profile.memory_slices)
    gi = c_void_p()
    code = _code(
        hgml,
        "hgmlDeviceCreateGpuInstanceWithPlacement",
        handle,
        profile.id,
        byref(placement),
        byref(gi),
    )
    if code != 0:
        raise MigError(f"cannot create {where}: HGML answered {code}")
    ci_index = CI_PROFILE_FOR_SLICES.get(profile.compute_slices)
    ci = c_void_p()
    try:
        if ci_index is None:
            raise MigError(f"no compute instance profile fills {profile.compute_slices} slices")
        info = CiProfileInfo()
        code = _code(
            hgml,
            "hgmlGpuInstanceGetComputeInstanceProfileInfo",
            gi,
            ci_index,
            CI_ENGINE_SHARED,
            byref(info),
        )
        if code == 0:
            code = _code(hgml, "hgmlGpuInstanceCreateComputeInstance", gi, info.id, byref(ci))
        if code != 0:
            raise MigError(f"HGML answered {code}")
        gi_info, ci_info = GiInfo(), CiInfo()
        if _code(hgml, "hgmlGpuInstanceGetInfo", gi, byref(gi_info)) != 0 or _code(
            hgml, "hgmlComputeInstanceGetInfo_v2", ci, byref(ci_info)
        ):
            raise MigError("its ids cannot be read")
    except MigError as exc:
        if ci.value:
            _code(hgml, "hgmlComputeInstanceDestroy", ci)
        _code(hgml, "hgmlGpuInstanceDestroy", gi)
        raise MigError(f"cannot create the compute instance of {where}: {exc}") from exc
    made = Instance(ppu, profile.name, start, int(gi_info.id), int(ci_info.id))
    log.info(
        "vendor thead: created %s: GPU instance %d, compute instance %d", where, made.gi, made.ci
    )
    return made


def find(hgml: Hgml, handle: c_void_p, gi: int) -> tuple[int, int, c_void_p] | None:
    """(profile id, start, handle) of GPU instance *gi* of the PPU, or ``None`` if gone."""
    instance = c_void_p()
    if _code(hgml, "hgmlDeviceGetGpuInstanceById", handle, gi, byref(instance)) != 0:
        return None
    info = GiInfo()
    if _code(hgml, "hgmlGpuInstanceGetInfo", instance, byref(info)) != 0:
        return None
    return int(info.profileId), int(info.placement.start), instance


def instances(
    hgml: Hgml, handle: c_void_p, profiles: tuple[GiProfile, ...]
) -> list[tuple[GiProfile, int, int]]:
    """Every GPU instance of the PPU: (profile, start, GPU instance id)."""
    out = []
    for profile in profiles:
        array = (c_void_p * max(1, len(profile.starts)))()
        count = c_uint(len(array))
        if _code(hgml, "hgmlDeviceGetGpuInstances", handle, profile.id, array, byref(count)):
            continue
        for i in range(min(int(count.value), len(array))):
            info = GiInfo()
            if _code(hgml, "hgmlGpuInstanceGetInfo", c_void_p(array[i]), byref(info)) == 0:
                out.append((profile, int(info.placement.start), int(info.id)))
    return out


def destroy(hgml: Hgml, handle: c_void_p, instance: Instance, profile: GiProfile | None) -> bool:
    """Destroy *instance* (compute instance first) if it is still the one recorded: the same
    GPU instance id, profile and start (HGML reuses ids). ``False`` while it is in use."""
    found = find(hgml, handle, instance.gi)
    if found is None or profile is None:
        return True  # gone already
    profile_id, start, gi = found
    if (profile_id, start) != (profile.id, instance.start):
        log.info(
            "vendor thead: GPU instance %d on PPU %d is not %s@%d any more: left alone",
            instance.gi,
            instance.ppu,
            instance.profile,
            instance.start,
        )
        return True
    where = (
        f"MIG {instance.profile}@{instance.start} (GPU instance {instance.gi}) on PPU "
        f"{instance.ppu}"
    )
    ci = c_void_p()
    if _code(hgml, "hgmlGpuInstanceGetComputeInstanceById", gi, instance.ci, byref(ci)) == 0:
        code = _code(hgml, "hgmlComputeInstanceDestroy", ci)
        if code == IN_USE:
            return False
        if code != 0:
            raise MigError(f"cannot destroy the compute instance of {where}: HGML answered {code}")
    code = _code(hgml, "hgmlGpuInstanceDestroy", gi)
    if code == IN_USE:
        return False  # another compute instance, carved by hand, is under it
    if code != 0:
        raise MigError(f"cannot destroy {where}: HGML answered {code}")
    log.info("vendor thead: destroyed %s", where)
    return True

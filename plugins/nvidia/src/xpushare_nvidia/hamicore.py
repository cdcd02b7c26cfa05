"""Reading HAMi-core's shared accounting files: per-container GPU memory and utilization.

Why: NVML sees processes, not containers, and inside a shared GPU only HAMi-core knows what
each container uses against its limit. Each container's HAMi-core keeps one memory-mapped
file (``CUDA_DEVICE_MEMORY_SHARED_CACHE``) with its limits and per-process usage; the
allocate step puts it in ``<hami_core dir>/containers/<pod uid>_<container>/`` on the node.

The layout is HAMi-core's C struct, little-endian x86-64 (research/hami-protocol.md §7.2 for
version 1; version 0 from HAMi's Go mirror of the older struct). The files are written by
code running inside tenants' containers, so they are untrusted input: read-only (never
mapped writable, never locked), size and magic checked, counts clamped, and a file that is
short, foreign or of an unknown version is skipped with the reason instead of raising.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: ``initialized_flag`` of an initialised region (HAMi-core multiprocess_memory_limit.h).
MAGIC: Final = 19920718
#: Devices and process slots per region (HAMi-core's CUDA_DEVICE_MAX_COUNT and
#: SHARED_REGION_MAX_PROCESS_NUM).
MAX_DEVICES: Final = 16
MAX_PROCS: Final = 1024
UUID_BYTES: Final = 96
#: An NVIDIA UUID ("GPU-" + 36) is 40 characters; HAMi's monitor cuts there too.
UUID_CHARS: Final = 40

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class Layout:
    """Offsets of one version of the region (bytes from the start of the file)."""

    version: int
    size: int
    device_num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    proc_size: int
    proc_used: int  # used[16] inside a slot
    used_size: int  # one per-device memory record
    used_total: int  # `total` inside that record
    proc_util: int  # device_util[16] inside a slot
    util_size: int
    util_sm: int  # `sm_util` inside that record
    proc_num: int | None  # None: the version has no usable count, scan every slot
    last_kernel_time: int | None
    priority: int


#: Version 1 (HAMi-core major 1), research/hami-protocol.md §7.2.
V1: Final = Layout(
    version=1,
    size=2_008_952,
    device_num=56,
    uuids=64,
    limit=1600,
    sm_limit=1728,
    procs=1856,
    proc_size=1960,
    proc_used=8,
    used_size=64,
    used_total=32,
    proc_util=1160,
    util_size=48,
    util_sm=16,
    proc_num=2_008_896,
    last_kernel_time=2_008_912,
    priority=2_008_908,
)

#: Version 0 (no version fields, unpadded 40-byte memory and 24-byte utilization records):
#: flag, sm flag, uint32 owner pid, 32-byte sem, then the same arrays; 1,197,896 bytes.
V0: Final = Layout(
    version=0,
    size=1_197_896,
    device_num=48,
    uuids=56,
    limit=1592,
    sm_limit=1720,
    procs=1848,
    proc_size=1168,
    proc_used=8,
    used_size=40,
    used_total=32,
    proc_util=776,
    util_size=24,
    util_sm=16,
    proc_num=None,  # HAMi's v0 reader sums every slot: free slots are zero
    last_kernel_time=None,
    priority=1_197_892,
)


@dataclass(frozen=True)
class DeviceUse:
    """One device as one container's HAMi-core region sees it."""

    uuid: str
    used_bytes: int
    limit_bytes: int  # 0: no limit
    sm_limit: int
    sm_util: int


@dataclass(frozen=True)
class Region:
    """What one accounting file says."""

    version: int
    devices: tuple[DeviceUse, ...]
    priority: int
    last_kernel_time: int | None


class Unreadable(ValueError):
    """The file is not a HAMi-core region this reader understands; the message says why."""


def read_region(path: Path) -> Region:
    """Parse one accounting file; :class:`Unreadable` for short, foreign or unknown ones."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise Unreadable(f"{path}: cannot open: {exc.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, 12, 0)
        if len(head) < 12:
            raise Unreadable(f"{path}: {size} bytes, too short for a HAMi-core region")
        flag, major, _minor = struct.unpack("<iii", head)
        if flag != MAGIC:
            raise Unreadable(f"{path}: not an initialised HAMi-core region (flag {flag})")
        layout = _layout(path, size, major)
        return _parse(fd, layout)
    finally:
        os.close(fd)


def _layout(path: Path, size: int, major: int) -> Layout:
    # HAMi's monitor picks the version by size (research/hami-protocol.md §7.3).
    if V0.size <= size < V1.size:
        return V0
    if size >= V1.size and major == 1:
        return V1
    if size >= V1.size:
        raise Unreadable(f"{path}: HAMi-core region version {major} is not supported")
    raise Unreadable(f"{path}: {size} bytes, truncated (a region is at least {V0.size})")


def _read(fd: int, offset: int, length: int) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise Unreadable(f"file shrank while reading at offset {offset}")
    return data


def _parse(fd: int, layout: Layout) -> Region:
    device_num = _U64.unpack(_read(fd, layout.device_num, 8))[0]
    if device_num > MAX_DEVICES:
        raise Unreadable(f"device count {device_num} exceeds {MAX_DEVICES}: foreign file")
    if layout.proc_num is None:
        procs = MAX_PROCS
    else:
        procs = max(0, min(_I32.unpack(_read(fd, layout.proc_num, 4))[0], MAX_PROCS))
    header = _read(fd, 0, layout.procs)
    slots = _read(fd, layout.procs, procs * layout.proc_size) if procs else b""
    used = [0] * device_num
    util = [0] * device_num
    for p in range(procs):
        base = p * layout.proc_size
        for i in range(device_num):
            used[i] += _U64.unpack_from(
                slots, base + layout.proc_used + i * layout.used_size + layout.used_total
            )[0]
            util[i] += _U64.unpack_from(
                slots, base + layout.proc_util + i * layout.util_size + layout.util_sm
            )[0]
    devices = []
    for i in range(device_num):
        raw = header[layout.uuids + i * UUID_BYTES : layout.uuids + (i + 1) * UUID_BYTES]
        uuid = raw.split(b"\x00", 1)[0][:UUID_CHARS].decode("ascii", "replace")
        if not uuid or not uuid.isprintable():
            continue
        devices.append(
            DeviceUse(
                uuid=uuid,
                used_bytes=used[i],
                limit_bytes=_U64.unpack_from(header, layout.limit + 8 * i)[0],
                sm_limit=_U64.unpack_from(header, layout.sm_limit + 8 * i)[0],
                sm_util=util[i],
            )
        )
    kernel_time = None
    if layout.last_kernel_time is not None:
        kernel_time = _U64.unpack(_read(fd, layout.last_kernel_time, 8))[0] or None
    return Region(
        version=layout.version,
        devices=tuple(devices),
        priority=_I32.unpack(_read(fd, layout.priority, 4))[0],
        last_kernel_time=kernel_time,
    )


@dataclass(frozen=True)
class ContainerRegion:
    """A region found on the node, with the container it belongs to."""

    pod_uid: str
    container: str
    path: Path
    region: Region


def container_dir_name(pod_uid: str, container: str) -> str:
    """``<pod uid>_<container>``: HAMi's per-container directory name (§7.3)."""
    return f"{pod_uid}_{container}"


def scan(containers_dir: Path) -> Iterator[ContainerRegion | tuple[Path, str]]:
    """Every container's region under *containers_dir*, or (path, why not) for bad ones.

    A directory holds one ``*.cache`` file per container; if there are several (a container
    restarted with another cache name), the newest readable one wins.
    """
    try:
        entries = sorted(os.scandir(containers_dir), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        pod_uid, sep, container = entry.name.partition("_")
        if not sep or not pod_uid or not container:
            yield Path(entry.path), "directory name is not <pod uid>_<container>"
            continue
        found = _newest_region(Path(entry.path))
        if isinstance(found, _Found):
            yield ContainerRegion(pod_uid, container, found.path, found.region)
        elif found[1]:
            yield found


@dataclass(frozen=True)
class _Found:
    path: Path
    region: Region


def _newest_region(directory: Path) -> _Found | tuple[Path, str]:
    try:
        caches = [p for p in directory.iterdir() if p.suffix == ".cache" and p.is_file()]
    except OSError as exc:
        return directory, f"cannot list: {exc.strerror}"
    if not caches:
        return directory, ""  # allocated, no CUDA process started yet: nothing to report
    problems = []
    for path in sorted(caches, key=_mtime, reverse=True):
        try:
            return _Found(path, read_region(path))
        except Unreadable as exc:
            problems.append(str(exc))
    return directory, "; ".join(problems)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0

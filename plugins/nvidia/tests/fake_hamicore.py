"""Fake HAMi-core accounting files, written byte by byte as HAMi-core's C struct lays them out.

The offsets are spelled out here from research/hami-protocol.md §7.2 (version 1) and HAMi's
Go mirror of the version 0 struct, independently of the plugin's reader, so a wrong offset
in the reader fails the tests instead of agreeing with itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = 19920718
MIB = 2**20


@dataclass
class Proc:
    pid: int
    used_mib: dict[int, int] = field(default_factory=dict)  # device index -> MiB
    sm_util: dict[int, int] = field(default_factory=dict)
    status: int = 1


@dataclass
class Region:
    uuids: list[str]
    limits_mib: list[int]
    sm_limits: list[int]
    procs: list[Proc] = field(default_factory=list)
    priority: int = 1
    last_kernel_time: int = 0


def v1_bytes(region: Region) -> bytearray:
    buf = bytearray(2_008_952)
    struct.pack_into("<iii", buf, 0, MAGIC, 1, 2)
    struct.pack_into("<Q", buf, 56, len(region.uuids))
    for i, u in enumerate(region.uuids):
        raw = u.encode()
        buf[64 + 96 * i : 64 + 96 * i + len(raw)] = raw
        struct.pack_into("<Q", buf, 1600 + 8 * i, region.limits_mib[i] * MIB)
        struct.pack_into("<Q", buf, 1728 + 8 * i, region.sm_limits[i])
    for p, proc in enumerate(region.procs):
        base = 1856 + 1960 * p
        struct.pack_into("<ii", buf, base, proc.pid, proc.pid + 100000)
        for i, mib in proc.used_mib.items():
            # used[i]: context, module, data, offset, total (bytes)
            struct.pack_into(
                "<QQQQQ", buf, base + 8 + 64 * i, MIB, 0, mib * MIB - MIB, 0, mib * MIB
            )
        for i, util in proc.sm_util.items():
            struct.pack_into("<Q", buf, base + 1160 + 48 * i + 16, util)
        struct.pack_into("<i", buf, base + 1928, proc.status)
    struct.pack_into("<iiii", buf, 2_008_896, len(region.procs), 1, 2, region.priority)
    struct.pack_into("<q", buf, 2_008_912, region.last_kernel_time)
    return buf


def v0_bytes(region: Region) -> bytearray:
    buf = bytearray(1_197_896)
    struct.pack_into("<iiI", buf, 0, MAGIC, 0, 4242)
    struct.pack_into("<Q", buf, 48, len(region.uuids))
    for i, u in enumerate(region.uuids):
        raw = u.encode()
        buf[56 + 96 * i : 56 + 96 * i + len(raw)] = raw
        struct.pack_into("<Q", buf, 1592 + 8 * i, region.limits_mib[i] * MIB)
        struct.pack_into("<Q", buf, 1720 + 8 * i, region.sm_limits[i])
    # v0 has no usable process count: slots are scanned whole, so place them sparsely.
    for n, proc in enumerate(region.procs):
        base = 1848 + 1168 * (n * 7)
        struct.pack_into("<ii", buf, base, proc.pid, proc.pid)
        for i, mib in proc.used_mib.items():
            struct.pack_into("<QQQQQ", buf, base + 8 + 40 * i, 0, 0, mib * MIB, 0, mib * MIB)
        for i, util in proc.sm_util.items():
            struct.pack_into("<Q", buf, base + 776 + 24 * i + 16, util)
        struct.pack_into("<i", buf, base + 1160, proc.status)
    struct.pack_into("<iiii", buf, 1_197_880, len(region.procs), 1, 2, region.priority)
    return buf


def write(directory: Path, data: bytes | bytearray, name: str = "vgpu.cache") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(bytes(data))
    return path

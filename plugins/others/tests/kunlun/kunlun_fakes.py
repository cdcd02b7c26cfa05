"""Kunlun test helpers: rows of the fake XPUML's device table, and a host tree for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import others_hosts as hosts
from others_hosts import node_settings as node_settings

GIB = 1024**3
#: A P800's global memory, as HAMi assumes it (98304 MiB).
P800_BYTES = 96 * GIB


def xpu(index: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": "P800",
        "serial": f"SN{index:04d}",
        "minor": index,
        "bus_id": f"00000000:{0x40 + index:02X}:00.0",
        "mem_total": P800_BYTES,
        "mem_used": 2 * GIB,
        "state": 201,
        "util": 30,
        "temp": 45,
        "power_mw": 150_000,
    }
    row.update(overrides)
    return row


def host_tree(root: Path, count: int) -> Path:
    """/dev/xpuctrl, /dev/xpu<i>, and each XPU's sysfs entry (NUMA: the second half on 1)."""
    return hosts.host_tree(root, count, control="/dev/xpuctrl", node="xpu", first_bus=0x40)

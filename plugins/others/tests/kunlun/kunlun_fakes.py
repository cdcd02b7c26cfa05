"""Kunlun test helpers: rows of the fake XPUML's device table, and a host tree for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    (root / "dev").mkdir(parents=True)
    (root / "dev/xpuctrl").touch()
    for i in range(count):
        (root / f"dev/xpu{i}").touch()
        dev = root / f"sys/bus/pci/devices/0000:{0x40 + i:02x}:00.0"
        dev.mkdir(parents=True)
        (dev / "numa_node").write_text(f"{0 if i < count // 2 else 1}\n")
    return root


def node_settings(lib: Path, root: Path, **config: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "library_path": str(lib),
        "search_loader_path": False,
        "host_root": str(root),
        "sysfs_root": str(root / "sys"),
    }
    settings.update(config)
    return settings

"""Enflame test helpers: rows of the fake EFML's device table, and a host tree for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: An S60's memory in MiB (48 GB), as EFML reports it.
S60_MIB = 49152


def gcu(index: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": "S60",
        "uuid": f"T6R{index:09d}",
        "bus": 0x50 + index,
        "mem_total": S60_MIB,
        "mem_used": 1024,
        "healthy": 1,
        "usage": 40,
        "temp": 52,
        "power": 120,
    }
    row.update(overrides)
    return row


def host_tree(root: Path, count: int) -> Path:
    """/dev/gcuctl, /dev/gcu<i>, and each GCU's sysfs entry (NUMA: the second half on 1)."""
    (root / "dev").mkdir(parents=True)
    (root / "dev/gcuctl").touch()
    for i in range(count):
        (root / f"dev/gcu{i}").touch()
        dev = root / f"sys/bus/pci/devices/0000:{0x50 + i:02x}:00.0"
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

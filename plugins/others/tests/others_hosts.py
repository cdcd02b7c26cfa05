"""A host tree for a vendor's fake library: its device nodes and each device's sysfs entry.

Why shared: the vendors whose devices are ``/dev/<node><i>`` beside one control node, found
in sysfs by PCI address (Kunlun, Enflame), need the same tree and the same node settings
pointing the plugin at it and at the fake library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def host_tree(root: Path, count: int, *, control: str, node: str, first_bus: int) -> Path:
    """*control* and ``/dev/<node><i>`` for *count* devices at PCI buses from *first_bus*,
    with their sysfs entries (NUMA: the second half on node 1)."""
    (root / "dev").mkdir(parents=True)
    (root / control.lstrip("/")).touch()
    for i in range(count):
        (root / f"dev/{node}{i}").touch()
        dev = root / f"sys/bus/pci/devices/0000:{first_bus + i:02x}:00.0"
        dev.mkdir(parents=True)
        (dev / "numa_node").write_text(f"{0 if i < count // 2 else 1}\n")
    return root


def node_settings(lib: Path, root: Path, **config: Any) -> dict[str, Any]:
    """Node settings loading only *lib*, with *root* as the host and its sysfs."""
    settings: dict[str, Any] = {
        "library_path": str(lib),
        "search_loader_path": False,
        "host_root": str(root),
        "sysfs_root": str(root / "sys"),
    }
    settings.update(config)
    return settings

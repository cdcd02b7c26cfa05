"""Neuron test helpers: a fake host with the Neuron driver's sysfs tree and /dev nodes.

The tree has the files the Neuron tools read (``core_count``, ``connected_devices``,
``info/architecture/*``, per-core ``device_mem/present``), in a temporary directory that the
plugin reads as ``sysfs_root``: the real reading path, on a host the test decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEVICES = "sys/devices/virtual/neuron_device"


def neuron_host(
    root: Path,
    count: int,
    cores: int = 2,
    instance_type: str = "trn1.32xlarge",
    name: str = "Trainium",
    used_bytes: int = 3 * 2**20,
) -> Path:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (root / f"dev/neuron{i}").touch()
        d = root / DEVICES / f"neuron{i}"
        (d / "info/architecture").mkdir(parents=True)
        (d / "core_count").write_text(f"{cores}\n")
        links = sorted({(i - 1) % count, (i + 1) % count} - {i})
        (d / "connected_devices").write_text(", ".join(map(str, links)) + "\n")
        (d / "info/architecture/device_name").write_text(f"{name}\n")
        (d / "info/architecture/instance_type").write_text(f"{instance_type}\n")
        for c in range(cores):
            mem = d / f"neuron_core{c}/stats/memory_usage/device_mem"
            mem.mkdir(parents=True)
            (mem / "present").write_text(f"{used_bytes}\n")
    return root


def node_settings(root: Path, **config: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {"host_root": str(root), "sysfs_root": str(root / "sys")}
    settings.update(config)
    return settings

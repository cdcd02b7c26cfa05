"""The Neuron driver's sysfs, the source the Neuron tools (``neuron-ls``, the sysfs user guide)
read: one directory ``neuron<N>`` per device under ``/sys/devices/virtual/neuron_device``.

Why sysfs and no library: the Neuron driver has no management library; ``neuron-ls`` and
``neuron-monitor`` are tools over the driver's sysfs and its runtime. Per device the files
read are ``core_count``, ``connected_devices`` (comma-separated indices),
``info/architecture/device_name``, ``info/architecture/instance_type`` and, per core,
``neuron_core<i>/stats/memory_usage/device_mem/present`` (bytes). Every read is bounded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: Most devices one node may have (trn2.48xlarge: 16; the driver's own ceiling is 64).
MAX_DEVICES: Final = 64
#: Bytes read from one sysfs file: each holds one short value.
READ_LIMIT: Final = 4096
_DEVICE_DIR: Final = re.compile(r"^neuron([0-9]{1,3})$")


@dataclass(frozen=True, slots=True)
class NeuronDevice:
    index: int
    cores: int
    name: str
    instance_type: str
    connected: tuple[int, ...]


def read(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            return f.read(READ_LIMIT).decode(errors="replace").strip()
    except OSError:
        return None


def device_dirs(root: Path) -> list[tuple[int, Path]]:
    """(index, directory) of each device the driver publishes, by index."""
    found = []
    for entry in root.iterdir():
        match = _DEVICE_DIR.match(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    found.sort()
    if len(found) > MAX_DEVICES:
        raise ValueError(f"{root} lists {len(found)} Neuron devices, more than {MAX_DEVICES}")
    return found


def _number(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and len(text) <= 4 else None


def device(index: int, path: Path, max_cores: int) -> NeuronDevice | None:
    """One device's facts; None when its core count cannot be read (the device is lost)."""
    cores = _number(read(path / "core_count"))
    if cores is None or not 0 < cores <= max_cores:
        return None
    links = [
        _number(x.strip()) for x in (read(path / "connected_devices") or "").split(",", MAX_DEVICES)
    ]
    arch = path / "info" / "architecture"
    return NeuronDevice(
        index=index,
        cores=cores,
        name=(read(arch / "device_name") or "")[:64],
        instance_type=(read(arch / "instance_type") or "")[:64],
        connected=tuple(n for n in links[:MAX_DEVICES] if n is not None),
    )


def memory_used_bytes(path: Path, cores: int) -> int | None:
    """Device memory in use, summed over the device's cores; None when none reports it."""
    total = None
    for core in range(cores):
        value = read(path / f"neuron_core{core}" / "stats/memory_usage/device_mem/present")
        if value and value.isdigit() and len(value) <= 20:
            total = (total or 0) + int(value)
    return total

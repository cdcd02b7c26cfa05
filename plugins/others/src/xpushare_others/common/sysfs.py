"""Facts the management libraries do not give, read from sysfs by PCI address.

Why sysfs: NUMA affinity and a device's DRM nodes are kernel facts, the same for every
vendor's PCI device (research/gpustack-devices.md §1.4 and §2.1: GPUStack joins each library
device to its PCI record and takes AMD/Hygon/MetaX device nodes from ``drm/card<N>`` and
``renderD<N>``). The root is configurable so the node agent can read the host's sysfs from a
mount, and tests can build a small tree in a temporary directory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

# A PCI address as the kernel names it: domain:bus:device.function, lower-case hex.
_BDF: Final = re.compile(r"^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


def normalize_bdf(raw: str) -> str | None:
    """``0000:3B:00.0`` → ``0000:3b:00.0``; a 8-digit domain is cut to the kernel's 4 digits."""
    text = raw.strip().lower()
    match = _BDF.match(text)
    if not match:
        return None
    domain, bus, dev, fn = match.groups()
    return f"{int(domain, 16):04x}:{bus}:{dev}.{fn}"


def bdf_from_parts(domain: int, bus: int, device: int, function: int) -> str:
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def _device_dir(sysfs_root: str, bdf: str) -> Path:
    return Path(sysfs_root, "bus", "pci", "devices", bdf)


def numa_node(sysfs_root: str, bdf: str | None) -> int | None:
    """The device's NUMA node, or None when unknown (the kernel writes -1 then)."""
    if not bdf:
        return None
    try:
        value = int((_device_dir(sysfs_root, bdf) / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def drm_minors(sysfs_root: str, bdf: str | None) -> tuple[int | None, int | None]:
    """(card N, renderD N) of the device's DRM nodes, from ``<device>/drm/``; None if absent."""
    if not bdf:
        return None, None
    card = render = None
    try:
        names = [p.name for p in (_device_dir(sysfs_root, bdf) / "drm").iterdir()]
    except OSError:
        return None, None
    for name in sorted(names):
        if name.startswith("card") and name[4:].isdigit() and card is None:
            card = int(name[4:])
        elif name.startswith("renderD") and name[7:].isdigit() and render is None:
            render = int(name[7:])
    return card, render


def read_first(sysfs_root: str, *relative: str) -> str | None:
    """The stripped text of the first readable file of *relative* (under *sysfs_root*)."""
    for rel in relative:
        try:
            return Path(sysfs_root, rel).read_text().strip()
        except OSError:
            continue
    return None

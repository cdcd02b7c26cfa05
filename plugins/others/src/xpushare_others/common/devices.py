"""Building what Allocate hands a container: device nodes and mounts that exist on the host.

Why check the host: kubelet refuses a container whose device list names a node that does not
exist, and the failure names neither the vendor nor the device. A control node a driver
version does not create (``/dev/mkfd`` on older Hygon drivers) is therefore left out, while a
device's own node that is missing is an error naming the device, raised by the vendor.
"""

from __future__ import annotations

from collections.abc import Iterable

from xpushare.models import DeviceNode
from xpushare_others.common.settings import VendorConfig


def node(path: str, permissions: str = "rw") -> DeviceNode:
    """A device node at the same path on the host and in the container."""
    return DeviceNode(host_path=path, container_path=path, permissions=permissions)


def present(
    config: VendorConfig, paths: Iterable[str], permissions: str = "rw"
) -> list[DeviceNode]:
    """Nodes for those of *paths* that exist on the host (as the agent sees it)."""
    return [node(p, permissions) for p in paths if config.on_host(p).exists()]


def missing(config: VendorConfig, paths: Iterable[str]) -> list[str]:
    """Those of *paths* the host does not have."""
    return [p for p in paths if not config.on_host(p).exists()]


def unique(nodes: Iterable[DeviceNode]) -> tuple[DeviceNode, ...]:
    """*nodes* without repeats, first occurrence kept (two devices share control nodes)."""
    seen: dict[str, DeviceNode] = {}
    for n in nodes:
        seen.setdefault(n.host_path, n)
    return tuple(seen.values())

"""Helpers for testing xpushare and vendor plugins without hardware.

Why a public package: vendor plugin authors test against the same fakes the core uses (fake
vendor libraries compiled from C, a fake kubelet, a fake API server, the whole pod flow, a
wheel installed in a fresh environment, a real Kubernetes control plane), so these helpers
are part of the plugin API. Import the modules you need, e.g.
``from xpushare.testing.clib import compile_shared_library``; the
harnesses are also importable from here (``from xpushare.testing import PodFlow``), loaded
only when first used, so importing one small helper does not start the scheduler's imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xpushare.testing.clib import LibraryVariants
    from xpushare.testing.hosts import VendorHosts, vendor_host
    from xpushare.testing.nodeagent import RunningAgent, run_node_agent, short_socket_dir
    from xpushare.testing.podflow import PodFlow
    from xpushare.testing.realcluster import ControlPlane, KubeletStandin
    from xpushare.testing.wheels import FreshEnv, WheelCache, clean_environ, install_in_fresh_venv

__all__ = [
    "ControlPlane",
    "FreshEnv",
    "KubeletStandin",
    "LibraryVariants",
    "PodFlow",
    "RunningAgent",
    "VendorHosts",
    "WheelCache",
    "clean_environ",
    "install_in_fresh_venv",
    "run_node_agent",
    "short_socket_dir",
    "vendor_host",
]

_HOMES = {
    "LibraryVariants": "xpushare.testing.clib",
    "VendorHosts": "xpushare.testing.hosts",
    "vendor_host": "xpushare.testing.hosts",
    "PodFlow": "xpushare.testing.podflow",
    "ControlPlane": "xpushare.testing.realcluster",
    "KubeletStandin": "xpushare.testing.realcluster",
    "RunningAgent": "xpushare.testing.nodeagent",
    "run_node_agent": "xpushare.testing.nodeagent",
    "short_socket_dir": "xpushare.testing.nodeagent",
    "FreshEnv": "xpushare.testing.wheels",
    "WheelCache": "xpushare.testing.wheels",
    "clean_environ": "xpushare.testing.wheels",
    "install_in_fresh_venv": "xpushare.testing.wheels",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'xpushare.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)

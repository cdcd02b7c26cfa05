"""Settings shared by the NVIDIA plugin's fixtures and tests (a module of its own, since
``conftest`` is not importable by name when several test trees are collected together)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

NODE = "gpu-node-1"


def base_config(driver_root: Path, hami_dir: Path) -> dict[str, Any]:
    return {
        "driver_roots": [str(driver_root)],
        # The bare soname would find the fake already loaded in this process by its soname:
        # tests must see only the configured root.
        "search_loader_path": False,
        "recovery_quiet_s": 0,
        "event_wait_max_s": 0,
        "hami_core": {"host_dir": "/usr/local/vgpu", "agent_dir": str(hami_dir)},
    }

"""The node's record of the MIG instances the agent created, one file per container.

Why a file per pod uid and container, written before creation: the agent may stop at any
moment. An entry is written as an *intent* (GPU, profile, start) before the instance is
created and completed with its ids after, so a release, even after a restart and even when
the node agent's own record of the Allocate was lost, finds every instance that may exist
for the container by the names it already has (pod uid, container name), which is what the
release hook asks of a vendor. Files are replaced atomically (write, then rename).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

from xpushare_nvidia.dynamic import Instance

log = logging.getLogger(__name__)

#: A container holds at most this many MIG instances (one per GPU slice, and no container
#: gets more slices than a node has MIG instances: 8 GPUs x 7). Bounds what a file may
#: make the agent read.
MAX_ENTRIES: Final = 64
MAX_FILE_BYTES: Final = 64 * 1024


class Journal:
    """The MIG journal in *directory* (the node agent's, on the node's disk)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def read(self, name: str) -> list[dict[str, Any]]:
        """The entries of container file *name* (``<pod uid>_<container>``); [] if none."""
        path = self._path(name)
        try:
            raw = path.read_bytes()[: MAX_FILE_BYTES + 1]
        except FileNotFoundError:
            return []
        if len(raw) > MAX_FILE_BYTES:
            log.error("vendor nvidia: MIG journal %s is too large; ignored", path)
            return []
        try:
            data = json.loads(raw)
        except ValueError:
            log.error("vendor nvidia: MIG journal %s is not JSON; ignored", path)
            return []
        entries = data.get("instances") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            return []
        return [e for e in entries[:MAX_ENTRIES] if _valid(e)]

    def write(self, name: str, entries: list[dict[str, Any]]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(name)
        if not entries:
            path.unlink(missing_ok=True)
            return
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps({"v": 1, "instances": entries}, sort_keys=True))
        partial.replace(path)

    def names(self) -> list[str]:
        """Every container file in the journal."""
        try:
            return sorted(p.stem for p in self.directory.glob("*.json"))
        except OSError:
            return []

    def on_gpu(self, gpu: str) -> list[str]:
        """The containers that hold (or may hold) an instance on *gpu*."""
        return [n for n in self.names() if any(e["gpu"] == gpu for e in self.read(n))]


def intent(gpu: str, profile: str, start: int) -> dict[str, Any]:
    return {"gpu": gpu, "profile": profile, "start": start}


def done(instance: Instance) -> dict[str, Any]:
    return asdict(instance)


def instance_of(entry: dict[str, Any]) -> Instance | None:
    """The created instance of a completed entry; ``None`` for an intent."""
    if not all(isinstance(entry.get(k), int) for k in ("gi", "ci")):
        return None
    if not isinstance(entry.get("uuid"), str):
        return None
    return Instance(
        gpu=entry["gpu"],
        profile=entry["profile"],
        start=entry["start"],
        gi=entry["gi"],
        ci=entry["ci"],
        uuid=entry["uuid"],
    )


def _valid(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("gpu"), str)
        and len(entry["gpu"]) <= 96
        and isinstance(entry.get("profile"), str)
        and len(entry["profile"]) <= 64
        and isinstance(entry.get("start"), int)
        and 0 <= entry["start"] < 64
    )

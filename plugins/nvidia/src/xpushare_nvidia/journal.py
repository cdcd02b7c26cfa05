"""The node's record of the MIG instances the agent created, one file per container.

Why a file per pod uid and container, written before creation: the agent may stop at any
moment. An entry is written as an *intent* (GPU, profile, start) before the instance is
created and completed with its ids after, so a release, even after a restart and even when
the node agent's own record of the Allocate was lost, finds every instance that may exist
for the container by the names it already has (pod uid, container name), which is what the
release hook asks of a vendor. Files are replaced atomically (write, then rename).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from xpushare.native.records import RecordFiles
from xpushare_nvidia.dynamic import Instance


class Journal(RecordFiles):
    """The MIG journal in *directory* (the node agent's, on the node's disk); a file per
    container, ``<pod uid>_<container>``."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, valid=_valid, what="vendor nvidia: MIG journal")

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

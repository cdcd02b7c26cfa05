"""Record files a vendor keeps on the node's disk: what it created at Allocate, per container.

Why: a vendor that creates things at Allocate (NVIDIA's and T-Head's MIG instances) must find
them again at release, after an agent restart too, by the names the release hook gives it
(pod uid, container). So it writes one small JSON file per container, before it creates
anything and again after, and reads it back at release. The files are on the node's disk,
where a tenant with a hostPath could write too: a read is bounded in bytes and in entries,
and an entry the vendor's check refuses is dropped, never raised. A write replaces the file
atomically (write a temporary file, then rename), so a crash leaves the old record or the
new one, never half of one.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

#: Entries of one file read at most: a container holds at most one instance per device slice
#: (a node of 8 GPUs cut in 7 has 56).
MAX_ENTRIES: Final = 64
#: Bytes of one file read at most (an entry is under 200 bytes).
MAX_FILE_BYTES: Final = 64 * 1024


class RecordFiles:
    """The record files in *directory*, one ``<name>.json`` per container.

    *valid* says whether an entry read back is one of the vendor's (a dict of the fields and
    ranges it wrote); *what* names the records in log lines (``"vendor nvidia: MIG journal"``).
    """

    def __init__(self, directory: Path, *, valid: Callable[[object], bool], what: str) -> None:
        self.directory = directory
        self._valid = valid
        self._what = what

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def read(self, name: str) -> list[dict[str, Any]]:
        """The valid entries of file *name*; [] when there is none or it is unreadable."""
        path = self.path(name)
        try:
            with path.open("rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.error("%s %s cannot be read (%s); ignored", self._what, path, exc)
            return []
        if len(raw) > MAX_FILE_BYTES:
            log.error("%s %s is over %d bytes; ignored", self._what, path, MAX_FILE_BYTES)
            return []
        try:
            data = json.loads(raw)
        except ValueError:
            log.error("%s %s is not JSON; ignored", self._what, path)
            return []
        entries = data.get("instances") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            return []
        return [e for e in entries[:MAX_ENTRIES] if self._valid(e)]

    def write(self, name: str, entries: list[dict[str, Any]]) -> None:
        """Replace file *name* with *entries* (no entries: remove it)."""
        path = self.path(name)
        if not entries:
            path.unlink(missing_ok=True)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps({"v": 1, "instances": entries}, sort_keys=True))
        partial.replace(path)

    def names(self) -> list[str]:
        """Every record file's name."""
        try:
            return sorted(p.stem for p in self.directory.glob("*.json"))
        except OSError:
            return []

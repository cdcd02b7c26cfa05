"""The release ledger: every pod allocated on this node, kept on disk until it is released.

Why on disk: what a vendor creates at Allocate (an sMLU instance, a vDCU configuration, a
HAMi-core cache directory, later a MIG instance) outlives the agent process, so the list of
what to free must too: a pod that ends while the agent is down (a DaemonSet update, a crash)
is still released when it comes back. kubelet removes only sockets from its device-plugin
directory when it starts (research/k8s-apis.md §1.4), so the default place, a subdirectory
of that directory, survives kubelet restarts and needs no mount of its own.

Layout: one JSON file per pod, ``<dir>/<pod key>.json``, replaced atomically (a temporary
file written and fsynced, renamed over the old one, the directory fsynced), so a crash
leaves the old or the new version, never half of one. The write order:

1. **before** the vendor's allocate runs, the container is written with ``record: null``
   ("may have created something"): nothing is ever created that the ledger does not name;
2. after it returns, its record replaces the null;
3. when a vendor has released the pod, the vendor is noted; when every vendor has, the file
   is deleted.

A crash between two steps repeats a step, never skips one, which is why release is "at least
once" and must be safely repeatable.

Bounds: at most :data:`MAX_PODS` pods (an Allocate beyond that is refused rather than
creating what could not be remembered) and :data:`MAX_ENTRIES` Allocates per pod; a file
larger than :data:`MAX_FILE_BYTES` or that does not parse is moved aside as ``*.bad`` with
a log line, and never poisons the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from xpushare.errors import XpushareError
from xpushare.models import AllocatedContainer, PodRef

if TYPE_CHECKING:
    from pathlib import Path

    from xpushare.models.allocation import Record

log = logging.getLogger(__name__)

#: Format version of a ledger file; a file of another version is set aside, not guessed at.
LEDGER_VERSION = 1

#: Pods remembered at once. kubelet runs at most 110 pods per node by default and a few
#: hundred when raised; 4,096 is far past any node, and bounds the ledger at 4,096 files.
MAX_PODS = 4096

#: Allocates remembered per pod: a pod has at most a few dozen containers, each allocated
#: once per vendor (again only when kubelet retries); 256 is more than any pod needs.
MAX_ENTRIES = 256

#: Largest ledger file read back: 256 entries of at most ~9 KiB each (record bounds in
#: xpushare.models.allocation, slices) stay under 4 MiB.
MAX_FILE_BYTES = 4 << 20

_SAFE_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


class LedgerError(XpushareError):
    """The ledger cannot remember a pod (full, or its directory is not writable)."""


def pod_key(pod: PodRef) -> str:
    """The pod's file name stem: its uid when it is a plain one, else a digest of who it is."""
    if pod.uid and _SAFE_KEY.match(pod.uid):
        return pod.uid
    who = pod.uid or f"{pod.namespace}/{pod.name}"
    return "h-" + hashlib.sha256(who.encode()).hexdigest()[:40]


@dataclass
class LedgerPod:
    """One pod's Allocates per vendor, and the vendors that have released it."""

    pod: PodRef
    vendors: dict[str, list[AllocatedContainer]] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)

    @property
    def key(self) -> str:
        return pod_key(self.pod)

    def pending(self) -> list[str]:
        """Vendors that still have to release this pod."""
        return sorted(v for v in self.vendors if v not in self.released)

    def encode(self) -> bytes:
        data = {
            "version": LEDGER_VERSION,
            "pod": self.pod.model_dump(),
            "vendors": {
                v: [c.model_dump(mode="json") for c in entries]
                for v, entries in sorted(self.vendors.items())
            },
            "released": sorted(self.released),
        }
        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LedgerPod:
        data: Any = json.loads(raw)
        if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION:
            raise ValueError(f"not a version {LEDGER_VERSION} ledger file")
        vendors = data.get("vendors")
        released = data.get("released")
        if not isinstance(vendors, dict) or not isinstance(released, list):
            raise ValueError("vendors or released is missing")
        pod = cls(PodRef.model_validate(data.get("pod")))
        for vendor, entries in vendors.items():
            if not isinstance(vendor, str) or not isinstance(entries, list):
                raise ValueError("a vendor's entries are not a list")
            if len(entries) > MAX_ENTRIES:
                raise ValueError(f"{len(entries)} entries for vendor {vendor!r}")
            pod.vendors[vendor] = [AllocatedContainer.model_validate(e) for e in entries]
        pod.released = {str(v) for v in released if v in pod.vendors}
        return pod


class ReleaseLedger:
    """The pods allocated on this node and not yet released (see the module docstring).

    Methods are called on the event loop; each change is written by a worker thread under
    one lock, in the order the changes were made, so the file always holds the latest state.
    """

    def __init__(self, directory: Path, *, max_pods: int = MAX_PODS) -> None:
        self.directory = directory
        self.max_pods = max_pods
        self._pods: dict[str, LedgerPod] = {}
        self._lock = asyncio.Lock()
        self._loaded = False

    # -- reading -----------------------------------------------------------------------------

    def load(self) -> list[str]:
        """Read every pod file (once); the problems found, one line each (files set aside)."""
        if self._loaded:
            return []
        self._loaded = True
        problems: list[str] = []
        try:
            names = sorted(p for p in self.directory.iterdir() if p.suffix == ".json")
        except FileNotFoundError:
            return []
        except OSError as exc:
            return [f"cannot read the release ledger {self.directory}: {exc}"]
        for path in names:
            try:
                if path.stat().st_size > MAX_FILE_BYTES:
                    raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
                pod = LedgerPod.decode(path.read_bytes())
                if pod.key != path.stem:
                    raise ValueError(f"it names pod {pod.pod} (key {pod.key})")
            except (OSError, ValueError, ValidationError) as exc:
                problems.append(f"release ledger file {path} set aside as .bad: {exc}")
                with contextlib.suppress(OSError):
                    path.replace(path.with_suffix(".bad"))
                continue
            if len(self._pods) >= self.max_pods:
                problems.append(f"release ledger {self.directory} holds over {self.max_pods} pods")
                break
            self._pods[pod.key] = pod
        for problem in problems:
            log.error("%s", problem)
        return problems

    def pods(self) -> list[LedgerPod]:
        """The pods not yet released by every vendor (a snapshot list)."""
        return list(self._pods.values())

    def get(self, key: str) -> LedgerPod | None:
        return self._pods.get(key)

    def __len__(self) -> int:
        return len(self._pods)

    # -- changes -----------------------------------------------------------------------------

    async def begin(self, pod: PodRef, vendor: str, container: AllocatedContainer) -> None:
        """Note that *vendor* is about to allocate *container* of *pod* (record ``None``).

        Raises :class:`LedgerError` when the ledger is full or cannot be written: the
        caller must then not let the vendor create anything.
        """
        key = pod_key(pod)
        async with self._lock:
            entry = self._pods.get(key)
            if entry is None:
                if len(self._pods) >= self.max_pods:
                    raise LedgerError(
                        f"the release ledger {self.directory} already remembers "
                        f"{len(self._pods)} pods not yet released (at most {self.max_pods}); "
                        "check the node agent's log for releases that keep failing"
                    )
                entry = LedgerPod(pod)
            entries = entry.vendors.setdefault(vendor, [])
            if len(entries) >= MAX_ENTRIES:
                raise LedgerError(
                    f"pod {pod} was allocated {len(entries)} times by vendor {vendor!r} on "
                    f"this node (at most {MAX_ENTRIES}); delete the pod"
                )
            entries.append(container)
            entry.released.discard(vendor)
            self._pods[key] = entry
            try:
                await self._write(entry)
            except OSError:
                entries.pop()
                if not any(entry.vendors.values()):
                    self._pods.pop(key, None)
                raise

    async def complete(
        self, pod: PodRef, vendor: str, container: AllocatedContainer, record: Record
    ) -> None:
        """Keep the record the vendor's allocate returned for the entry :meth:`begin` noted."""
        async with self._lock:
            entry = self._pods.get(pod_key(pod))
            entries = entry.vendors.get(vendor, []) if entry is not None else []
            for i, noted in enumerate(entries):
                if noted is container:
                    entries[i] = noted.model_copy(update={"record": dict(record)})
                    assert entry is not None
                    await self._write(entry)
                    return
            # Released meanwhile (the pod ended during its Allocate): the release was given
            # a null record and found what was created by the pod's uid and container name.

    async def released(self, key: str, vendor: str, seen: int) -> None:
        """*vendor* released the first *seen* entries of pod *key*; forget the pod when done.

        Entries added after the release started (an Allocate raced the pod's end) stay, so
        they are released in turn.
        """
        async with self._lock:
            entry = self._pods.get(key)
            if entry is None:
                return
            entries = entry.vendors.get(vendor) or []
            del entries[:seen]
            if entries:
                await self._write(entry)
                return
            entry.vendors.pop(vendor, None)
            if entry.vendors:
                await self._write(entry)
                return
            try:
                await asyncio.to_thread(self._remove, key)
            finally:
                # Forgotten once its file is gone, so an empty ledger has nothing left on
                # disk. A file a failed or cut-short removal leaves is read again at the
                # next start and released again (releases are idempotent).
                del self._pods[key]

    # -- files -------------------------------------------------------------------------------

    async def _write(self, entry: LedgerPod) -> None:
        data = entry.encode()
        await asyncio.to_thread(self._write_file, entry.key, data)

    def _write_file(self, key: str, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{key}.json"
        tmp = self.directory / f".{key}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.replace(path)
        self._sync_directory()

    def _remove(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.directory / f"{key}.json").unlink()
        self._sync_directory()

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

"""The DRA plugin's memory of the claims it prepared, on the node's disk, and their CDI specs.

Why on disk: kubelet calls NodePrepareResources again after its own restart or ours, and
NodeUnprepareResources possibly long after; what a vendor created for a claim (a HAMi-core
cache directory, an instance) must be released exactly by what was recorded, and a claim
already prepared must not be prepared twice. The order, as the release ledger's
(node/ledger.py):

1. ``preparing``, **before** any vendor ``allocate`` runs, with every request and no record:
   a crash from here on leaves a file that says "something may have been created";
2. ``prepared`` once every request was allocated and the CDI spec written: a later prepare
   answers from the file, with no API call and no vendor call;
3. the file is removed after the vendor released the claim at unprepare.

A ``preparing`` file found at a prepare (the agent stopped, or a vendor call failed) is
released first, then prepared afresh: neither lost nor prepared twice.

Files are replaced atomically (written, fsynced, renamed, directory fsynced). Bounds: at most
:data:`MAX_CLAIMS` files, each at most :data:`MAX_FILE_BYTES`; a file that does not parse is
set aside as ``*.bad`` and never poisons the others.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from xpushare.models import AllocatedContainer, PodRef

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1

#: Claims prepared at once on one node for one vendor: a claim serves at least one pod, and
#: kubelet runs a few hundred pods at most; 4,096 bounds the directory.
MAX_CLAIMS = 4096

#: One claim has at most 32 allocation results (the API's limit) and each record 8 KiB
#: (models/allocation.py): 1 MiB is ample, and bounds what one file costs to read.
MAX_FILE_BYTES = 1 << 20

#: A claim UID as kubelet sends it (a UUID); anything else never becomes a file name.
_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")

State = Literal["preparing", "prepared"]


def valid_uid(uid: str) -> bool:
    return bool(_UID.match(uid))


@dataclass
class ClaimCheckpoint:
    """One claim as remembered: who, what each request got, and what kubelet was answered."""

    claim: PodRef
    state: State
    #: One entry per request of the claim served by this vendor (``container`` = request).
    requests: list[AllocatedContainer]
    #: The answer given to kubelet (NodePrepareResourceResponse.devices, as dicts).
    devices: list[dict[str, Any]]
    #: The CDI spec written for the claim, rewritten if the CDI directory lost it.
    cdi_spec: dict[str, Any] | None = None

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": CHECKPOINT_VERSION,
                "claim": self.claim.model_dump(mode="json"),
                "state": self.state,
                "requests": [r.model_dump(mode="json") for r in self.requests],
                "devices": self.devices,
                "cdiSpec": self.cdi_spec,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> ClaimCheckpoint:
        raw = json.loads(data)
        if not isinstance(raw, dict) or raw.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"not a version {CHECKPOINT_VERSION} DRA checkpoint")
        state = raw.get("state")
        if state not in ("preparing", "prepared"):
            raise ValueError(f"unknown state {state!r}")
        devices = raw.get("devices") or []
        spec = raw.get("cdiSpec")
        if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
            raise ValueError("devices is not a list of objects")
        if spec is not None and not isinstance(spec, dict):
            raise ValueError("cdiSpec is not an object")
        return cls(
            claim=PodRef.model_validate(raw.get("claim")),
            state=state,
            requests=[AllocatedContainer.model_validate(r) for r in raw.get("requests") or []],
            devices=devices,
            cdi_spec=spec,
        )


class CheckpointError(Exception):
    """The checkpoint cannot take another claim, or its directory is not writable."""


class Checkpoints:
    """The claims of one vendor, ``<directory>/<claim uid>.json`` (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._claims: dict[str, ClaimCheckpoint] = {}

    def load(self) -> None:
        """Read every file (blocking; once at start, before kubelet is served)."""
        self._claims.clear()
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob("*.json"))[:MAX_CLAIMS]:
            uid = path.stem
            try:
                if not valid_uid(uid) or path.stat().st_size > MAX_FILE_BYTES:
                    raise ValueError("not a claim checkpoint (name or size)")
                entry = ClaimCheckpoint.decode(path.read_bytes())
                if entry.claim.uid != uid:
                    raise ValueError(f"names claim uid {entry.claim.uid!r}")
            except (OSError, ValueError, ValidationError) as exc:
                log.error("DRA checkpoint %s is unreadable, set aside as .bad: %s", path, exc)
                with contextlib.suppress(OSError):
                    path.replace(path.with_suffix(".bad"))
                continue
            self._claims[uid] = entry

    def get(self, uid: str) -> ClaimCheckpoint | None:
        return self._claims.get(uid)

    def __len__(self) -> int:
        return len(self._claims)

    def put(self, entry: ClaimCheckpoint) -> None:
        """Write *entry* durably (blocking; run it on a worker thread)."""
        uid = entry.claim.uid
        if uid not in self._claims and len(self._claims) >= MAX_CLAIMS:
            raise CheckpointError(
                f"{len(self._claims)} claims are prepared already (at most {MAX_CLAIMS}); "
                "unprepare some, or look for claims kubelet never unprepared"
            )
        _atomic_write(self.directory, f"{uid}.json", entry.encode())
        self._claims[uid] = entry

    def remove(self, uid: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.directory / f"{uid}.json").unlink()
        _sync_directory(self.directory)
        self._claims.pop(uid, None)


def _atomic_write(directory: Path, name: str, data: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(directory / name)
    _sync_directory(directory)


def _sync_directory(directory: Path) -> None:
    if not directory.is_dir():
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- CDI -------------------------------------------------------------------------------------

#: The CDI spec version written: 0.6.0 is the first with device annotations, and containerd
#: 1.7 / CRI-O 1.28 read it.
CDI_VERSION = "0.6.0"

#: Mount options of a vendor's mount: a bind mount, read-only when the vendor asks.
_BIND = ["nosuid", "nodev", "bind"]


def cdi_kind(vendor: str) -> str:
    """The CDI kind of *vendor*'s claim devices (``<vendor>.xpushare.io/claim``)."""
    return f"{vendor}.xpushare.io/claim"


def cdi_file_name(vendor: str, uid: str) -> str:
    return f"{vendor}.xpushare.io-claim_{uid}.json"


def write_cdi_spec(directory: Path, vendor: str, uid: str, spec: dict[str, Any]) -> None:
    _atomic_write(directory, cdi_file_name(vendor, uid), json.dumps(spec, indent=1).encode())


def remove_cdi_spec(directory: Path, vendor: str, uid: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (directory / cdi_file_name(vendor, uid)).unlink()


def cdi_device(name: str, edits: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name, "containerEdits": edits}
    if annotations:
        device["annotations"] = annotations
    return device


def container_edits(
    envs: dict[str, str],
    devices: list[tuple[str, str, str]],
    mounts: list[tuple[str, str, bool]],
) -> dict[str, Any]:
    """CDI containerEdits from a vendor's envs, (container, host, permissions) device nodes
    and (host, container, read-only) mounts."""
    edits: dict[str, Any] = {"env": [f"{k}={v}" for k, v in sorted(envs.items())]}
    if devices:
        edits["deviceNodes"] = [{"path": c, "hostPath": h, "permissions": p} for c, h, p in devices]
    if mounts:
        edits["mounts"] = [
            {"hostPath": h, "containerPath": c, "options": (["ro"] if ro else []) + _BIND}
            for h, c, ro in mounts
        ]
    return edits

"""vDCU configs: the file through which Hygon's runtime limits one container to a slice.

How a DCU is shared (HAMi's DCU device plugin and GPUStack, research/gpustack-devices.md
§2.6 and §4.5): each sharing container gets a ``vdev0.conf`` in a directory of its own on
the host, mounted read-only at ``/etc/vdev/docker/``; the DTK/hyhal user-space runtime in
the container reads it and confines the process to the listed compute units (a CU bit mask,
so slices are disjoint: compute is partitioned, never over-committed) and memory. Fields, one
``key: value`` per line, as HAMi writes them:

====================  =====================================================================
``PciBusId``          the physical DCU's PCI address
``cu_mask``           ``0x``-prefixed hex mask of the CUs this slice may use
``cu_count``          the number of set bits of the mask (the runtime refuses a file where
                      they differ: "inconsistent with hamming weight of cu mask field")
``mem``               ``<MiB> MiB``
``device_id``         the DCU's index inside the container, which sees one: always 0
``vdev_id``           a node-wide number of the slice
``pipe_id``           a per-DCU number of the slice
``enable``            ``1``
====================  =====================================================================

The files are also the ledger: CUs, vdev ids and pipe ids in use are read back from the
existing files, so a restart of the node agent loses nothing, and a retried Allocate for the
same container finds and reuses its own file.

A directory is named ``<pod uid>_<container>``; when the pod has ended the node agent's
release hook removes it (:func:`release`), which frees its CUs, vdev id and pipe.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: The file name inside each container's directory, as HAMi writes it.
CONF_NAME: Final = "vdev0.conf"
#: Where the runtime looks for it inside the container.
CONTAINER_DIR: Final = "/etc/vdev/docker"
#: HAMi's bounds: 200 vdev ids per node, 20 pipes per DCU (its DCU plugin's Start()).
MAX_VDEV_IDS: Final = 200
MAX_PIPES: Final = 20

_SAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")


class VdevError(RuntimeError):
    """A vDCU config cannot be made; the message names the DCU and the pod, and what to do."""


@dataclass(frozen=True)
class VdevConf:
    pci_bus_id: str
    cu_mask: int
    memory_mib: int
    vdev_id: int
    pipe_id: int

    @property
    def cu_count(self) -> int:
        return self.cu_mask.bit_count()

    def render(self) -> str:
        return (
            f"PciBusId: {self.pci_bus_id}\n"
            f"cu_mask: 0x{self.cu_mask:x}\n"
            f"cu_count: {self.cu_count}\n"
            f"mem: {self.memory_mib} MiB\n"
            "device_id: 0\n"
            f"vdev_id: {self.vdev_id}\n"
            f"pipe_id: {self.pipe_id}\n"
            "enable: 1\n"
        )

    @classmethod
    def parse(cls, text: str) -> VdevConf | None:
        fields: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        try:
            return cls(
                pci_bus_id=fields["PciBusId"],
                cu_mask=int(fields["cu_mask"], 16),
                memory_mib=int(fields["mem"].split()[0]),
                vdev_id=int(fields["vdev_id"]),
                pipe_id=int(fields["pipe_id"]),
            )
        except (KeyError, ValueError, IndexError):
            return None


def dir_name(pod_uid: str, pod: str, container: str) -> str:
    """The directory of one container's config (pod UID, else namespace/name, and container)."""
    return _SAFE.sub("-", f"{pod_uid or pod}_{container}")


def existing(agent_dir: Path) -> dict[str, VdevConf]:
    """Every readable config under *agent_dir*, by directory name."""
    out: dict[str, VdevConf] = {}
    if not agent_dir.is_dir():
        return out
    for conf in sorted(agent_dir.glob(f"*/{CONF_NAME}")):
        try:
            parsed = VdevConf.parse(conf.read_text())
        except OSError:
            continue
        if parsed is not None:
            out[conf.parent.name] = parsed
    return out


def allocate(
    agent_dir: Path,
    name: str,
    *,
    pci_bus_id: str,
    total_cus: int,
    cu_count: int,
    memory_mib: int,
    who: str,
) -> VdevConf:
    """Write (or find again) the config *name* for a slice of *cu_count* CUs of one DCU."""
    records = existing(agent_dir)
    mine = records.pop(name, None)
    if mine is not None and mine.pci_bus_id == pci_bus_id and mine.cu_count == cu_count:
        return mine  # kubelet retried Allocate: the same slice
    used_cus = 0
    pipes: set[int] = set()
    for r in records.values():
        if r.pci_bus_id == pci_bus_id:
            used_cus |= r.cu_mask
            pipes.add(r.pipe_id)
    vdev_ids = {r.vdev_id for r in records.values()}
    mask = 0
    for bit in range(total_cus):
        if mask.bit_count() == cu_count:
            break
        if not used_cus >> bit & 1:
            mask |= 1 << bit
    stale = f"configs of pods that no longer exist under {agent_dir} still hold CUs: remove them"
    if mask.bit_count() < cu_count:
        free = total_cus - used_cus.bit_count()
        raise VdevError(
            f"{who}: Hygon DCU {pci_bus_id} has {free} free compute unit(s) of {total_cus}, the "
            f"slice needs {cu_count}; {stale}"
        )
    vdev_id = next((i for i in range(MAX_VDEV_IDS) if i not in vdev_ids), None)
    pipe_id = next((i for i in range(MAX_PIPES) if i not in pipes), None)
    if vdev_id is None or pipe_id is None:
        raise VdevError(f"{who}: no free vDCU id or pipe on Hygon DCU {pci_bus_id}; {stale}")
    conf = VdevConf(pci_bus_id, mask, memory_mib, vdev_id, pipe_id)
    target = agent_dir / name
    target.mkdir(parents=True, exist_ok=True)
    partial = target / f".{CONF_NAME}.partial"
    partial.write_text(conf.render())
    partial.replace(target / CONF_NAME)
    return conf


def release(agent_dir: Path, name: str) -> bool:
    """Remove the config *name* (a directory of :func:`dir_name`); ``False`` if it is gone.

    Only the files this module writes are removed, so a directory someone else put files in
    is left (and reported by the ``OSError`` of its removal).
    """
    target = agent_dir / name
    if not target.is_dir():
        return False
    for leftover in (target / CONF_NAME, target / f".{CONF_NAME}.partial"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    target.rmdir()
    return True

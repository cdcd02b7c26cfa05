"""Device ids for AMD GPUs and their partitions, and how to read the physical GPU back.

Why ids carry structure: an MI300-class GPU in a compute partition mode (DPX, QPX, CPX, ...)
shows up as several logical GPUs, each with its own render node, and amdsmi enumerates each
as a processor of its own. The scheduler books each logical GPU like a device. If the mode is
changed while pods hold the old layout, the node's new inventory has new devices on the same
silicon; the fit must be able to tell, from *any* id it meets in the usage, which physical GPU
it is on and under which layout, so it never books a partition of a GPU that a pod holds
whole (or the reverse). So:

* the physical GPU is ``GPU-<16 hex digits>``, ROCm's own UUID form, from the ASIC's unique
  id (what ``ROCR_VISIBLE_DEVICES`` accepts and GPUStack keys devices by,
  research/gpustack-devices.md §2.1);
* an unpartitioned GPU's id is its physical id; a partition's is
  ``<physical>-<mode><partition index>``, e.g. ``GPU-4d3a0f9e12ab55c0-cpx3``.

A GPU whose unique id cannot be read keeps amdsmi's UUID as its physical id (it then cannot
be partitioned, which only MI300-class GPUs with unique ids are).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

_ID: Final = re.compile(r"^(?P<physical>GPU-[0-9a-f]{16})(?:-(?P<mode>[a-z]+)(?P<part>\d+))?$")

#: Compute partition modes that leave the GPU whole (amdsmi reports "SPX", or nothing on
#: GPUs without partitioning).
WHOLE_MODES: Final = frozenset({"", "spx", "n/a"})


@dataclass(frozen=True)
class DeviceKey:
    """What an id says: the physical GPU and, for a partition, its layout and index."""

    physical: str
    mode: str | None = None
    partition: int | None = None

    @property
    def layout(self) -> str:
        """``"whole"`` or the partition mode: two ids of one GPU conflict across layouts."""
        return self.mode or "whole"


def physical_id(serial: int) -> str:
    return f"GPU-{serial:016x}"


def device_id(physical: str, mode: str | None, partition: int | None) -> str:
    """The id of a whole GPU (*mode* ``None``) or of one of its partitions."""
    if mode is None or partition is None:
        return physical
    return f"{physical}-{mode.lower()}{partition}"


def parse(device: str) -> DeviceKey:
    """The physical GPU and layout of an id; an id of another form is its own physical GPU."""
    match = _ID.match(device)
    if match is None:
        return DeviceKey(physical=device)
    part = match.group("part")
    return DeviceKey(
        physical=match.group("physical"),
        mode=match.group("mode"),
        partition=int(part) if part is not None else None,
    )

"""A device in a node's inventory: what a vendor's ``detect`` hook reports."""

from enum import StrEnum
from typing import Annotated, Self

from pydantic import Field, model_validator

from xpushare.models._base import Model

NonNegative = Annotated[int, Field(ge=0)]


class LinkKind(StrEnum):
    """How two devices of one node are connected, fastest first."""

    NVLINK = "nvlink"
    XGMI = "xgmi"
    HCCS = "hccs"
    MLULINK = "mlulink"
    SAME_BOARD = "same-board"
    PCIE_SWITCH = "pcie-switch"
    PCIE_HOST_BRIDGE = "pcie-host-bridge"
    SAME_NUMA = "same-numa"
    CROSS_NUMA = "cross-numa"
    OTHER = "other"


class TopologyLink(Model):
    """A link from the device that holds it to a peer device on the same node."""

    peer: str = Field(min_length=1, description="id (UUID) of the peer device")
    kind: LinkKind
    count: int = Field(default=1, ge=1, description="number of links of this kind, e.g. NVLinks")


#: Most slices a partitionable device is cut into, and most placements one profile has. MIG
#: has 8 memory slices and 7 compute slices (A100, H100, H200, B200: NVIDIA MIG User Guide,
#: "Supported MIG Profiles"); 64 leaves room for finer hardware while a set of slices still
#: fits one machine word, which is how the fit compares placements.
MAX_SLICES = 64
#: Most profiles one device publishes: an H100 has 9 (with the +me and -gfx variants), 64 is
#: ample and bounds what a node's annotation can make the scheduler decode.
MAX_PROFILES = 64


class PartitionPlacement(Model):
    """Where an instance of a profile may start, in memory slices (NVML's placement)."""

    start: int = Field(ge=0, lt=MAX_SLICES)
    size: int = Field(ge=1, le=MAX_SLICES)

    @model_validator(mode="after")
    def _inside(self) -> Self:
        if self.start + self.size > MAX_SLICES:
            raise ValueError(
                f"placement {self.start}+{self.size} ends past slice {MAX_SLICES}: no device "
                "has that many"
            )
        return self


class PartitionProfile(Model):
    """A hardware partition a device can be split into (a MIG profile, a vNPU template, ...).

    A profile with ``placements`` is *dynamic*: instances are created when a container is
    given one, at a placement the scheduler chose so that it overlaps no instance in use
    (:mod:`xpushare.scheduling.partitions`). Without placements, ``max_count`` instances of
    the profile exist already and are handed out as they are (static partitions).
    """

    name: str = Field(
        min_length=1, max_length=64, description="vendor's profile name, e.g. '1g.10gb' or 'vir02'"
    )
    memory_mib: NonNegative
    compute_percent: int = Field(ge=0, le=100, description="share of the device's compute")
    max_count: int = Field(default=1, ge=1, description="how many fit on one device at once")
    compute_slices: int = Field(
        default=0, ge=0, le=MAX_SLICES, description="compute slices an instance takes; 0 unknown"
    )
    memory_slices: int = Field(
        default=0, ge=0, le=MAX_SLICES, description="memory slices an instance takes; 0 unknown"
    )
    placements: tuple[PartitionPlacement, ...] = Field(
        default=(),
        max_length=MAX_SLICES,
        description="where an instance may be created; empty: the instances exist already",
    )


class Device(Model):
    """One schedulable accelerator of one vendor on one node.

    ``memory_mib`` is the device's own memory; over-commit is applied by the scheduler from
    its configuration, never baked into the inventory, so a change of policy needs no
    re-registration.
    """

    vendor: str = Field(min_length=1)
    id: str = Field(min_length=1, description="stable identity, a UUID where the vendor has one")
    index: NonNegative = Field(description="the vendor library's index of the device on the node")
    model: str = Field(min_length=1, description="product name, e.g. 'NVIDIA A100-SXM4-80GB'")
    memory_mib: NonNegative
    compute_units: NonNegative = Field(default=0, description="SMs, CUs, AI cores; 0 if unknown")
    share_slots: int = Field(default=10, ge=1, description="how many containers may share it")
    numa_node: int | None = Field(default=None, ge=0)
    pci_bus_id: str | None = None
    healthy: bool = True
    mode: str = Field(default="shared", description="sharing mode, e.g. 'shared', 'mig'")
    partitions: tuple[PartitionProfile, ...] = Field(default=(), max_length=MAX_PROFILES)
    links: tuple[TopologyLink, ...] = ()
    extra: dict[str, str] = Field(default_factory=dict, description="vendor-specific facts")

    @property
    def partitioned(self) -> bool:
        """True when the device is split into hardware partitions (MIG and the like)."""
        return bool(self.partitions)

"""A device in a node's inventory: what a vendor's ``detect`` hook reports."""

from enum import StrEnum
from typing import Annotated

from pydantic import Field

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


class PartitionProfile(Model):
    """A hardware partition a device can be split into (a MIG profile, a vNPU template, ...)."""

    name: str = Field(min_length=1, description="vendor's profile name, e.g. '1g.10gb' or 'vir02'")
    memory_mib: NonNegative
    compute_percent: int = Field(ge=0, le=100, description="share of the device's compute")
    max_count: int = Field(default=1, ge=1, description="how many fit on one device at once")


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
    partitions: tuple[PartitionProfile, ...] = ()
    links: tuple[TopologyLink, ...] = ()
    extra: dict[str, str] = Field(default_factory=dict, description="vendor-specific facts")

    @property
    def partitioned(self) -> bool:
        """True when the device is split into hardware partitions (MIG and the like)."""
        return bool(self.partitions)

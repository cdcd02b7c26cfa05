"""What a container receives at kubelet's Allocate, and what its vendor frees when the pod ends."""

from typing import Annotated

from pydantic import Field, StringConstraints

from xpushare.models._base import Model
from xpushare.models.assignment import DeviceSlice
from xpushare.models.device import Device
from xpushare.models.kube import PodRef


class Mount(Model):
    host_path: str = Field(min_length=1)
    container_path: str = Field(min_length=1)
    read_only: bool = True


class DeviceNode(Model):
    host_path: str = Field(min_length=1)
    container_path: str = Field(min_length=1)
    permissions: str = Field(default="rw", pattern=r"^[rwm]{1,3}$")


#: Bounds of a vendor's release record (:attr:`ContainerAllocation.record`): it is kept on
#: the node's disk for every container until its pod is released, so it holds names and ids
#: (a MIG instance, an sMLU instance, a directory), never data. 16 entries of 512 characters
#: is 8 KiB per container at most.
MAX_RECORD_ENTRIES = 16
MAX_RECORD_KEY = 63
MAX_RECORD_VALUE = 512

RecordKey = Annotated[str, StringConstraints(min_length=1, max_length=MAX_RECORD_KEY)]
RecordValue = Annotated[str, StringConstraints(max_length=MAX_RECORD_VALUE)]
Record = dict[RecordKey, RecordValue]


class ContainerAllocation(Model):
    """One container's share of one vendor's devices, in the shape kubelet takes."""

    envs: dict[str, str] = Field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    cdi_devices: tuple[str, ...] = Field(default=(), description="fully qualified CDI names")
    annotations: dict[str, str] = Field(default_factory=dict)
    record: Record = Field(
        default_factory=dict,
        max_length=MAX_RECORD_ENTRIES,
        description="what the vendor created for this container (instance ids, paths), kept "
        "by the node agent across restarts and handed back to xpushare_release; never sent "
        "to kubelet",
    )


class AllocateRequest(Model):
    """Everything a vendor needs to prepare one container: who, which slices, on what devices."""

    pod: PodRef
    container: str
    node: str
    resource_name: str
    slices: tuple[DeviceSlice, ...]
    devices: tuple[Device, ...] = Field(description="the inventory entries of the slices")
    pod_annotations: dict[str, str] = Field(
        default_factory=dict,
        description="the pod's annotations as the node agent read them (per-pod settings such "
        "as MetaX's metax-tech.com/sgpu-qos-policy); the pod's namespace and name are in pod",
    )


class AllocatedContainer(Model):
    """One Allocate of one container, as the node agent's release ledger remembers it."""

    container: str
    init: bool = False
    slices: tuple[DeviceSlice, ...]
    record: Record | None = Field(
        default=None,
        description="the record the vendor's allocate returned; None when allocate did not "
        "return one (it failed, or the agent stopped while it ran): the vendor must then find "
        "what it may have created from the pod's uid and the container's name",
    )


class ReleaseRequest(Model):
    """A pod that ended, and what one vendor prepared for its containers on this node."""

    pod: PodRef
    node: str
    containers: tuple[AllocatedContainer, ...] = Field(
        description="every Allocate of this vendor for the pod, oldest first; one container "
        "may appear more than once when kubelet allocated it again"
    )

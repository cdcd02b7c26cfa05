"""What a container receives at kubelet's Allocate: environment, device nodes, mounts, CDI."""

from pydantic import Field

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


class ContainerAllocation(Model):
    """One container's share of one vendor's devices, in the shape kubelet takes."""

    envs: dict[str, str] = Field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    cdi_devices: tuple[str, ...] = Field(default=(), description="fully qualified CDI names")
    annotations: dict[str, str] = Field(default_factory=dict)


class AllocateRequest(Model):
    """Everything a vendor needs to prepare one container: who, which slices, on what devices."""

    pod: PodRef
    container: str
    node: str
    resource_name: str
    slices: tuple[DeviceSlice, ...]
    devices: tuple[Device, ...] = Field(description="the inventory entries of the slices")

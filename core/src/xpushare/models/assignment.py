"""Which devices a pod got: decided at bind, written to the pod, read at Allocate."""

from pydantic import Field

from xpushare.models._base import Model


class DeviceSlice(Model):
    """The share of one device given to one container."""

    device_id: str = Field(min_length=1)
    index: int = Field(default=0, ge=0)
    memory_mib: int = Field(ge=0)
    compute_percent: int = Field(ge=0, le=100)
    exclusive: bool = False
    partition: str | None = None


class ContainerAssignment(Model):
    """All slices of one vendor given to one container."""

    container: str
    vendor: str = Field(min_length=1)
    init: bool = Field(default=False, description="an init container (runs before the others)")
    devices: tuple[DeviceSlice, ...]


class PodAssignment(Model):
    """A pod's whole placement on one node, over all its containers and vendors."""

    node: str = Field(min_length=1)
    containers: tuple[ContainerAssignment, ...]

    def vendors(self) -> frozenset[str]:
        return frozenset(c.vendor for c in self.containers)

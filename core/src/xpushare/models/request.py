"""What one container asks of one vendor, parsed from its resource limits and annotations."""

from typing import Self

from pydantic import Field, model_validator

from xpushare.models._base import Model

#: Most devices one container may ask of one vendor. No machine carries more than a few
#: dozen accelerators (an HGX node 8 or 16, the densest inference boxes 32 to 64); 1,024
#: leaves room for every machine built while keeping every loop over a count short.
MAX_DEVICE_COUNT = 1024
#: Most memory one device can have, in MiB: 2^24 MiB = 16 TiB, over fifty times the largest
#: accelerator memory shipping (288 GB: AMD MI355X, NVIDIA B300). A request above it cannot
#: fit any device, so it is refused where it is read instead of being carried around.
MAX_DEVICE_MEMORY_MIB = 2**24


class ContainerRequest(Model):
    """One container's request for devices of one vendor.

    Memory is asked either in MiB per device or as a percent of each device, never both;
    neither means the whole device's memory, as in HAMi, so a HAMi user's pod spec reserves
    what it reserved there (the webhook turns a bare whole-device request into an exclusive
    one).
    """

    vendor: str = Field(min_length=1)
    container: str = Field(default="", description="container name; empty for a bare request")
    count: int = Field(default=1, ge=1, description="number of devices")
    memory_mib: int | None = Field(default=None, ge=0, description="MiB per device")
    memory_percent: int | None = Field(default=None, ge=1, le=100, description="percent per device")
    compute_percent: int = Field(default=0, ge=0, le=100, description="percent per device")
    exclusive: bool = Field(default=False, description="whole devices, shared with nobody")
    models_include: tuple[str, ...] = Field(default=(), description="model must contain one")
    models_exclude: tuple[str, ...] = Field(default=(), description="model must contain none")
    uuids_include: tuple[str, ...] = ()
    uuids_exclude: tuple[str, ...] = ()
    numa_bind: bool = Field(default=False, description="all devices on one NUMA node")
    partition: str | None = Field(default=None, description="a partition profile, e.g. MIG")
    mode: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="sharing modes the devices may be in, HAMi's nvidia.com/vgpu-mode: a "
        "device fits when its vendor's name for its mode is a substring of this value (e.g. "
        "'mig', 'hami-core'); honoured by the fit of the vendor that reads it",
    )

    topology_aware: bool = Field(
        default=False,
        description="HAMi's topology-aware GPU policy is in effect for the pod (its "
        "hami.io/gpu-scheduler-policy, or the configured device policy; set by the placement "
        "engine): a vendor whose fit knows the links between its devices picks by them, one "
        "device the least connected to the other candidates, several the best connected set",
    )

    @model_validator(mode="after")
    def _memory_one_way(self) -> Self:
        if self.memory_mib is not None and self.memory_percent is not None:
            raise ValueError("memory is given both in MiB and as a percent; ask for one of them")
        return self

    def memory_for(self, device_memory_mib: int) -> int:
        """MiB this request takes on a device with *device_memory_mib* of memory."""
        if self.memory_mib is not None:
            return self.memory_mib
        if self.memory_percent is not None:
            return device_memory_mib * self.memory_percent // 100
        return device_memory_mib

    @property
    def effective_compute(self) -> int:
        """Compute percent per device; an exclusive request takes all of it."""
        return 100 if self.exclusive else self.compute_percent

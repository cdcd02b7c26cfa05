"""What is allocated on one device: the scheduler's working state per device."""

from pydantic import Field

from xpushare.models._base import Model


class DeviceUsage(Model):
    """Allocated share of one device, summed over the pods placed on it."""

    device_id: str = Field(min_length=1)
    used_slots: int = Field(default=0, ge=0)
    used_memory_mib: int = Field(default=0, ge=0)
    used_compute_percent: int = Field(default=0, ge=0)
    exclusive: bool = Field(default=False, description="a container holds the whole device")
    partitions_in_use: tuple[str, ...] = Field(
        default=(), description="names of partition profiles taken on this device"
    )

"""What the node agent samples from a vendor: device and per-container usage, health."""

from pydantic import Field

from xpushare.models._base import Model


class DeviceSample(Model):
    """One device's readings; ``None`` means the vendor could not measure that value."""

    device_id: str
    utilization_percent: float | None = Field(default=None, ge=0)
    memory_used_mib: int | None = Field(default=None, ge=0)
    memory_total_mib: int | None = Field(default=None, ge=0)
    temperature_c: float | None = None
    power_w: float | None = Field(default=None, ge=0)
    healthy: bool = True
    process_count: int | None = Field(default=None, ge=0)


class ContainerUsage(Model):
    """What one container uses on one device, where the vendor can tell (e.g. HAMi-core)."""

    device_id: str
    namespace: str = ""
    pod: str = ""
    container: str = ""
    memory_used_mib: int = Field(ge=0)
    memory_limit_mib: int | None = Field(default=None, ge=0)
    utilization_percent: float | None = Field(default=None, ge=0)


class MonitorSnapshot(Model):
    """All readings of one vendor at one moment; served by the metrics endpoint as-is."""

    devices: tuple[DeviceSample, ...] = ()
    containers: tuple[ContainerUsage, ...] = ()


class HealthEvent(Model):
    """A device became unhealthy, or healthy again."""

    device_id: str
    healthy: bool
    reason: str = ""

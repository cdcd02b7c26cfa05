"""How a vendor plugin describes itself, what its isolation needs the webhook to refuse, and
the JSON patch its admission hook returns."""

import posixpath
import re
from typing import Any, Literal

from pydantic import Field, field_validator

from xpushare.models._base import Model

#: The major version of the vendor contract (hook names, arguments and models). A plugin
#: that declares another major is refused at load time with a message saying which core
#: version it needs.
API_VERSION = 1

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Kubernetes extended resource names are "<domain>/<name>" (k8s-apis.md §1).
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class ResourceNames(Model):
    """The extended resource names of a vendor, e.g. ``nvidia.com/gpu``.

    ``count`` is the device-plugin resource kubelet accounts; the others are read from the
    pod spec by the scheduler only (kube-scheduler is told to ignore them).
    """

    count: str
    memory: str | None = None
    memory_percent: str | None = None
    compute: str | None = None

    @field_validator("count", "memory", "memory_percent", "compute")
    @classmethod
    def _is_resource_name(cls, value: str | None) -> str | None:
        if value is not None and not _RESOURCE.match(value):
            raise ValueError(f"{value!r} is not an extended resource name like 'vendor.com/gpu'")
        return value

    def all(self) -> tuple[str, ...]:
        return tuple(n for n in (self.count, self.memory, self.memory_percent, self.compute) if n)


class VendorSpec(Model):
    """What ``xpushare_vendor`` returns: the vendor's name, contract version and resources."""

    name: str = Field(description="equals the entry-point name; a lower-case DNS label")
    api_version: int = Field(ge=1)
    display_name: str = ""
    resource_names: ResourceNames
    memory_unit_mib: int = Field(
        default=1, ge=1, description="MiB per unit of the memory resource (HAMi's MemoryFactor)"
    )
    default_memory_mib: int = Field(
        default=0,
        ge=0,
        description="MiB a container asking for neither memory nor a percent gets per device "
        "(HAMi's defaultMemory); 0: the whole device",
    )
    compute_total: int = Field(
        default=100,
        ge=1,
        description="what the compute resource calls a whole device: 100 (percent) for most "
        "vendors, 16 for HAMi's Moore Threads sgpu-core (sixteenths); a larger value is taken "
        "as the whole device, as HAMi clamps it, with an admission warning",
    )
    default_compute_percent: int = Field(
        default=0,
        ge=0,
        le=100,
        description="compute percent of a container that gives none (HAMi's defaultCores)",
    )
    config: dict[str, Any] = Field(default_factory=dict, description="vendor defaults, shown")
    request_resources: tuple[str, ...] | None = Field(
        default=(),
        description="container resources, beside resource_names, that the request hook "
        "reads; a container that names none of them (in limits or requests) is not asked. "
        "None: the hook is asked for every container",
    )

    @field_validator("name")
    @classmethod
    def _is_dns_label(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError(f"vendor name {value!r} must be a lower-case DNS label")
        return value


class JsonPatchOp(Model):
    """One RFC 6902 operation, as the admission webhook returns it."""

    op: Literal["add", "remove", "replace", "test"]
    path: str = Field(pattern=r"^(/[^/]*)+$")
    value: Any = None


def _absolute(value: str) -> str:
    # Compared with pod paths after the same normalisation (webhook), so declare it once here.
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")
    return posixpath.normpath("/" + value.lstrip("/"))


class AdmissionGuard(Model):
    """What the admission webhook must refuse so that a vendor's in-container isolation holds.

    Returned by ``xpushare_admission_guard``. Every entry only *adds* to what the webhook
    refuses; a namespace in ``webhook.bypass_namespaces`` is exempt from all of them. Paths
    are absolute; they are normalised (``//``, ``.``, ``..``, a trailing ``/``) as the pod's
    paths are before they are compared.
    """

    env: tuple[str, ...] = Field(
        default=(),
        description=(
            "environment variables that switch the isolation off or around, refused in pods "
            "that ask for this vendor's devices (also as the prefix of an envFrom); a '*' at "
            "the end matches any suffix"
        ),
    )
    container_paths: tuple[str, ...] = Field(
        default=(),
        description=(
            "paths inside a container that gets this vendor's shares that the isolation "
            "depends on (e.g. /etc/ld.so.preload, HAMi-core's directory): no volume of such a "
            "container may be mounted at, under or above them"
        ),
    )
    host_paths: tuple[str, ...] = Field(
        default=(),
        description=(
            "node paths the isolation depends on (e.g. HAMi-core's directory with the library "
            "and the preload file): no hostPath volume of a pod that asks for this vendor's "
            "devices may be one of them, under or above them"
        ),
    )
    device_paths: tuple[str, ...] = Field(
        default=(),
        description=(
            "the vendor's device nodes on the node, as shell patterns (e.g. /dev/nvidia*): a "
            "privileged container of a pod that asks for no managed device may not mount a "
            "hostPath volume that is, or holds, one of them"
        ),
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or "*" in name[:-1] or any(c in name for c in "?[]"):
                raise ValueError(f"{name!r}: a variable name, with '*' only at its end")
        return value

    @field_validator("container_paths", "host_paths", "device_paths")
    @classmethod
    def _paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_absolute(v) for v in value)

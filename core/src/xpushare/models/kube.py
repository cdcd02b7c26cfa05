"""Slim views of Kubernetes pods and nodes: the parts the vendor hooks need.

Hooks get these instead of raw API objects so a plugin never depends on one Kubernetes
client library, and so the simulator can build them without a cluster.
"""

from pydantic import Field

from xpushare.models._base import Model
from xpushare.models.device import Device


class PodRef(Model):
    """Enough to name a pod in an error message or an API call."""

    namespace: str = "default"
    name: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class ContainerView(Model):
    """One container's name, resources and environment as written in the pod spec."""

    name: str
    limits: dict[str, str] = Field(default_factory=dict)
    requests: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    init: bool = False


class PodView(Model):
    """A pod as the scheduler-side hooks see it."""

    ref: PodRef
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    containers: tuple[ContainerView, ...] = ()
    scheduler_name: str = ""


class NodeView(Model):
    """A node as the scheduler-side hooks see it: its devices of one vendor and its metadata."""

    name: str
    devices: tuple[Device, ...] = ()
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

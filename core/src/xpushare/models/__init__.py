"""The data every part of xpushare exchanges, as pydantic v2 models.

Why one package at the bottom of the import layers: the scheduler, the node agent, the
simulator and every vendor plugin speak in these types, and a vendor plugin is untrusted
input, so its output is validated against these models at the plugin boundary. Nothing here
does I/O or imports another part of xpushare.
"""

from xpushare.models.allocation import (
    AllocatedContainer,
    AllocateRequest,
    ContainerAllocation,
    DeviceNode,
    Mount,
    ReleaseRequest,
)
from xpushare.models.assignment import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.models.device import (
    Device,
    LinkKind,
    PartitionPlacement,
    PartitionProfile,
    TopologyLink,
)
from xpushare.models.fit import FitReason, FitResult, NodeFit
from xpushare.models.kube import ContainerView, NodeView, PodRef, PodView
from xpushare.models.monitor import ContainerUsage, DeviceSample, HealthEvent, MonitorSnapshot
from xpushare.models.request import ContainerRequest
from xpushare.models.usage import DeviceUsage
from xpushare.models.vendor import (
    API_VERSION,
    AdmissionGuard,
    JsonPatchOp,
    ResourceNames,
    VendorSpec,
)

__all__ = [
    "API_VERSION",
    "AdmissionGuard",
    "AllocateRequest",
    "AllocatedContainer",
    "ContainerAllocation",
    "ContainerAssignment",
    "ContainerRequest",
    "ContainerUsage",
    "ContainerView",
    "Device",
    "DeviceNode",
    "DeviceSample",
    "DeviceSlice",
    "DeviceUsage",
    "FitReason",
    "FitResult",
    "HealthEvent",
    "JsonPatchOp",
    "LinkKind",
    "MonitorSnapshot",
    "Mount",
    "NodeFit",
    "NodeView",
    "PartitionPlacement",
    "PartitionProfile",
    "PodAssignment",
    "PodRef",
    "PodView",
    "ReleaseRequest",
    "ResourceNames",
    "TopologyLink",
    "VendorSpec",
]

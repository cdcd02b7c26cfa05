"""The names a plugin may import are pinned: changing them is a contract change."""

import xpushare
import xpushare.models


def test_top_level_exports() -> None:
    assert sorted(xpushare.__all__) == [
        "API_VERSION",
        "AdmissionDenied",
        "PluginError",
        "VendorUnavailable",
        "XpushareError",
        "__version__",
        "hookimpl",
    ]
    for name in xpushare.__all__:
        assert hasattr(xpushare, name)


def test_models_exports() -> None:
    assert sorted(xpushare.models.__all__) == sorted(
        [
            "API_VERSION",
            # Added with xpushare_admission_guard: an optional hook, so API_VERSION stays.
            "AdmissionGuard",
            "AllocateRequest",
            # Added with xpushare_release: an optional hook, so API_VERSION stays.
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
    )

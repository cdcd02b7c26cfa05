"""Allocate: the device nodes and variables a ROCm container gets, from detected GPUs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from amd_fakes import NOT_SUPPORTED, cpx_partitions, mi300x

from xpushare.errors import PluginError
from xpushare.models import AllocateRequest, Device, DeviceSlice, PodRef
from xpushare.plugins import VendorHandle

Start = Callable[..., VendorHandle]


def _request(devices: list[Device], *slices: DeviceSlice) -> AllocateRequest:
    ids = {s.device_id for s in slices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="trainer", uid="u-1"),
        container="main",
        node="node-a",
        resource_name="amd.com/gpu",
        slices=slices,
        devices=tuple(d for d in devices if d.id in ids),
    )


def _paths(allocation) -> list[str]:  # type: ignore[no-untyped-def]
    return [d.host_path for d in allocation.devices]


def test_two_whole_gpus_get_kfd_their_dri_nodes_and_container_numbering(started: Start) -> None:
    handle = started([mi300x(i) for i in range(4)])
    devices = list(handle.detect())
    allocation = handle.allocate(
        _request(
            devices,
            DeviceSlice(device_id=devices[2].id, index=2, memory_mib=196608, compute_percent=100),
            DeviceSlice(device_id=devices[1].id, index=1, memory_mib=8000, compute_percent=25),
        )
    )
    assert _paths(allocation) == [
        "/dev/kfd",
        "/dev/dri/renderD130",
        "/dev/dri/card2",
        "/dev/dri/renderD129",
        "/dev/dri/card1",
    ]
    assert all(
        d.container_path == d.host_path and d.permissions == "rw" for d in allocation.devices
    )
    assert allocation.envs == {
        "XPUSHARE_AMD_DEVICES": f"{devices[2].id},{devices[1].id}",
        "ROCR_VISIBLE_DEVICES": "0,1",
        "AMD_VISIBLE_DEVICES": "none",
        "XPUSHARE_AMD_MEMORY_LIMIT_0": "196608",
        "XPUSHARE_AMD_COMPUTE_UNITS_0": "304",
        "XPUSHARE_AMD_MEMORY_LIMIT_1": "8000",
        "XPUSHARE_AMD_COMPUTE_UNITS_1": "76",
    }


def test_a_partition_gets_its_own_render_node(started: Start) -> None:
    handle = started(cpx_partitions(0))
    devices = list(handle.detect())
    allocation = handle.allocate(
        _request(
            devices,
            DeviceSlice(device_id=devices[5].id, index=5, memory_mib=4096, compute_percent=8),
        )
    )
    assert _paths(allocation) == ["/dev/kfd", "/dev/dri/renderD133", "/dev/dri/card5"]
    assert allocation.envs["XPUSHARE_AMD_COMPUTE_UNITS_0"] == "3"  # floor(38 * 8 / 100)
    assert allocation.envs["XPUSHARE_AMD_DEVICES"] == "GPU-4d3a0f9e12ab5500-cpx5"


def test_a_gpu_missing_from_the_inventory_is_refused_naming_pod_and_gpu(started: Start) -> None:
    handle = started([mi300x(0)])
    devices = list(handle.detect())
    gone = DeviceSlice(device_id="GPU-00000000000000ff", memory_mib=1, compute_percent=1)
    with pytest.raises(
        PluginError, match=r"pod ml/trainer, container 'main'.*GPU-00000000000000ff"
    ):
        handle.allocate(_request(devices, gone))


def test_a_gpu_without_a_known_render_node_is_refused(started: Start) -> None:
    handle = started([mi300x(0)], failures=[("amdsmi_get_gpu_enumeration_info", -1, NOT_SUPPORTED)])
    devices = list(handle.detect())
    piece = DeviceSlice(device_id=devices[0].id, memory_mib=1024, compute_percent=10)
    with pytest.raises(PluginError, match="no known DRM render node"):
        handle.allocate(_request(devices, piece))

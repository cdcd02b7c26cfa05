"""Neuron's placement rules: core requests split into devices, core bitmasks on one device,
contiguous blocks of whole devices by instance type.

The rules are HAMi's (hami-protocol.md §8.2, ``pkg/device/awsneuron``); each case says which
one it pins. They run through the plugin host with the real request parser.
"""

from __future__ import annotations

from typing import Any

import pytest

from xpushare.models import (
    ContainerAssignment,
    ContainerView,
    Device,
    DeviceSlice,
    DeviceUsage,
    FitReason,
    NodeView,
    PodAssignment,
    PodRef,
    PodView,
)
from xpushare.plugins import VendorHandle
from xpushare.testing.hosts import vendor_host
from xpushare_others.neuron import plugin
from xpushare_others.neuron.cores import block

DEV = "aws.amazon.com/neuron"
CORE = "aws.amazon.com/neuroncore"


@pytest.mark.parametrize(
    ("free", "count", "ring", "picked"),
    [
        # trn: aligned blocks of 1, 4, 8 or 16 starting at a multiple of the size.
        ([True] * 8, 4, False, [0, 1, 2, 3]),
        ([False] + [True] * 7, 4, False, [4, 5, 6, 7]),
        ([True, False] + [True] * 6, 4, False, [4, 5, 6, 7]),
        ([False] * 3 + [True] * 4 + [False], 4, False, None),  # 3-6 free, not aligned
        ([True] * 8, 2, False, None),  # 2 is no block size
        ([True] * 8, 3, False, None),
        ([True] * 16, 16, False, list(range(16))),
        # inf: any run of consecutive devices.
        ([False] * 3 + [True] * 4 + [False], 4, True, [3, 4, 5, 6]),
        ([True, False, True, True, True], 3, True, [2, 3, 4]),
        ([True, False, True, False], 2, True, None),
    ],
)
def test_contiguous_blocks(free: list[bool], count: int, ring: bool, picked: Any) -> None:
    assert block(free, count, ring) == picked


def _node(
    count: int = 8, cores: int = 2, kind: str = "trn1.32xlarge", over: dict[int, Any] | None = None
) -> NodeView:
    devices = tuple(
        Device(
            vendor="awsneuron",
            id=f"node-a-AWSNeuron-{i}",
            index=i,
            model="Trainium",
            memory_mib=0,
            compute_units=cores,
            share_slots=cores,
            **(over or {}).get(i, {}),
        )
        for i in range(count)
    )
    return NodeView(
        name="node-a", devices=devices, labels={"node.kubernetes.io/instance-type": kind}
    )


@pytest.fixture
def handle() -> Any:
    host = vendor_host("awsneuron", plugin, node_name=None)
    yield host.vendor("awsneuron")
    host.close()


def _request(handle: VendorHandle, annotations: dict[str, str] | None = None, **limits: str) -> Any:
    c = ContainerView(name="main", limits=limits)
    pod = PodView(ref=PodRef(name="p"), annotations=annotations or {}, containers=(c,))
    return handle.resource_request(pod=pod, container=c)


def _fit(
    handle: VendorHandle, request: Any, node: NodeView, usage: Any = None, order: Any = ()
) -> Any:
    return handle.fit(request=request, node=node, usage=usage or {}, device_order=order)


def _held(index: int, partition: str | None = None, compute: int = 50) -> dict[str, DeviceUsage]:
    d = f"node-a-AWSNeuron-{index}"
    return {
        d: DeviceUsage(
            device_id=d,
            used_slots=1,
            used_compute_percent=compute,
            exclusive=compute == 100 and partition is None,
            partitions_in_use=(partition,) if partition else (),
        )
    }


@pytest.mark.parametrize(
    ("limits", "count", "cores"),
    [
        ({DEV: "1"}, 1, None),  # whole devices
        ({DEV: "4"}, 4, None),
        ({CORE: "1"}, 1, 1),  # up to a device's cores: one device
        ({CORE: "2"}, 1, 2),
        ({CORE: "4"}, 2, None),  # a multiple: whole devices
        ({CORE: "6"}, 3, None),
        ({CORE: "1", DEV: "1"}, 1, 1),  # cores win: the webhook adds the device count
    ],
)
def test_requests_split_cores_into_devices(
    handle: VendorHandle, limits: dict[str, str], count: int, cores: int | None
) -> None:
    request = _request(handle, **limits)
    assert request.count == count
    assert request.partition == (None if cores is None else f"neuroncores:{cores}")
    assert request.exclusive == (cores is None)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({CORE: "3"}, r"must be 1 to 2 \(one device\) or a multiple of 2"),
        ({CORE: "0"}, r"neuroncore must be greater than 0"),
        ({CORE: "1.5"}, r"neuroncore must be a whole number"),
    ],
)
def test_bad_core_requests_are_refused(
    handle: VendorHandle, limits: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _request(handle, **limits)


def test_one_core_takes_the_lowest_free_core_of_a_device(handle: VendorHandle) -> None:
    one = _request(handle, **{CORE: "1"})
    node = _node(2)
    first = _fit(handle, one, node)
    assert first.devices[0].partition == "cores:1" and first.devices[0].compute_percent == 50
    # Core 0 of device 0 held by us: core 1 is next (HAMi's addCoreUsage: 3 - used).
    second = _fit(handle, one, node, _held(0, "cores:1"))
    assert (second.devices[0].index, second.devices[0].partition) == (0, "cores:2")
    # A pod HAMi placed records its mask as cores: 2 is core 1, so core 0 is free.
    hami = _fit(handle, one, node, _held(0, compute=2))
    assert (hami.devices[0].index, hami.devices[0].partition) == (0, "cores:1")
    # Both cores taken (our core 0 and HAMi's mask 2): the next device.
    both = {**_held(0, "cores:1")}
    both["node-a-AWSNeuron-0"] = both["node-a-AWSNeuron-0"].model_copy(
        update={"used_slots": 2, "used_compute_percent": 52}
    )
    result = _fit(handle, one, node, both)
    assert result.devices[0].index == 1 and result.reasons == {FitReason.SLOTS_EXHAUSTED: 1}


def test_two_cores_need_both_free_and_hold_the_device(handle: VendorHandle) -> None:
    two = _request(handle, **{CORE: "2"})
    node = _node(2, cores=4)
    result = _fit(handle, two, node, _held(0, "cores:2", compute=25))
    assert (result.devices[0].index, result.devices[0].partition) == (0, "cores:5")
    assert result.devices[0].compute_percent == 50 and not result.devices[0].exclusive
    # On two-core devices, two cores are the whole device.
    whole = _fit(handle, two, _node(2))
    assert whole.devices[0].partition == "cores:3" and whole.devices[0].exclusive
    refused = _fit(handle, two, _node(1), _held(0, "cores:1"))
    assert refused.reasons == {FitReason.INSUFFICIENT_COMPUTE: 1}


def test_a_whole_device_needs_every_core_free(handle: VendorHandle) -> None:
    request = _request(handle, **{DEV: "1"})
    result = _fit(handle, request, _node(2), _held(0, "cores:1"))
    assert result.devices[0].index == 1 and result.devices[0].exclusive
    assert result.reasons == {FitReason.EXCLUSIVE_CONFLICT: 1}


def test_several_devices_are_a_contiguous_block_by_instance_type(handle: VendorHandle) -> None:
    four = _request(handle, **{DEV: "4"})
    busy = _held(1, "cores:1")
    result = _fit(handle, four, _node(8), busy)
    assert [s.index for s in result.devices] == [4, 5, 6, 7]
    assert all(s.exclusive and s.compute_percent == 100 for s in result.devices)
    busy.update(_held(5, "cores:1"))
    refused = _fit(handle, four, _node(8), busy)
    assert not refused.fits and FitReason.NUMA_MISMATCH in refused.reasons
    assert "aligned block of 1, 4, 8 or 16" in refused.explain()
    # The same devices on an inf2 node: any run of four (2-4 is broken, 6-7 too short).
    ring = _fit(handle, four, _node(8, kind="inf2.48xlarge"), _held(1, "cores:1"))
    assert [s.index for s in ring.devices] == [2, 3, 4, 5]
    two = _request(handle, **{DEV: "2"})
    assert not _fit(handle, two, _node(8)).fits  # 2 is no block on trn
    assert [s.index for s in _fit(handle, two, _node(8, kind="inf2.24xlarge")).devices] == [0, 1]
    # Without the node label, the instance type the driver published decides.
    bare = NodeView(
        name="node-a",
        devices=tuple(
            d.model_copy(update={"extra": {"instance_type": "inf2.48xlarge"}})
            for d in _node(4).devices
        ),
    )
    assert [s.index for s in _fit(handle, two, bare).devices] == [0, 1]


def test_mutex_uuid_and_health(handle: VendorHandle) -> None:
    node = _node(3, over={0: {"healthy": False}})
    one = _request(handle, **{CORE: "1"})
    result = _fit(handle, one, node)
    assert result.devices[0].index == 1 and result.reasons == {FitReason.UNHEALTHY: 1}
    mutex = _request(handle, {"hami.io/gpu-scheduler-policy": "mutex"}, **{CORE: "1"})
    assert mutex.exclusive
    result = _fit(handle, mutex, node, _held(1, "cores:1"))
    assert result.devices[0].index == 2 and result.devices[0].exclusive
    picked = _request(
        handle, {"aws.amazon.com/use-neuron-uuid": "node-a-AWSNeuron-2"}, **{CORE: "1"}
    )
    result = _fit(handle, picked, node)
    assert result.devices[0].index == 2 and result.reasons[FitReason.UUID_MISMATCH] == 1
    avoided = _request(
        handle, {"aws.amazon.com/nouse-neuron-uuid": "node-a-AWSNeuron-1"}, **{DEV: "1"}
    )
    assert _fit(handle, avoided, node).devices[0].index == 2


def test_bind_writes_hamis_neuron_annotations(handle: VendorHandle) -> None:
    def assignment(*pieces: DeviceSlice) -> PodAssignment:
        row = ContainerAssignment(container="main", vendor="awsneuron", devices=pieces)
        return PodAssignment(node="node-a", containers=(row,))

    pod = PodView(ref=PodRef(name="p"))
    cores = handle.patch_annotations(
        pod=pod,
        assignment=assignment(
            DeviceSlice(device_id="node-a-AWSNeuron-3", index=3, memory_mib=0,
                        compute_percent=50, partition="cores:2")
        ),
    )  # fmt: skip
    assert cores == {
        "AWS_NEURON_IDS": "7",
        "NEURON_ALLOCATED": "false",
        "NEURON_RESOURCE_TYPE": "aws.amazon.com/neuroncore",
        "aws.amazon.com/predicate-node": "node-a",
    }
    whole = handle.patch_annotations(
        pod=pod,
        assignment=assignment(
            *(DeviceSlice(device_id=f"node-a-AWSNeuron-{i}", index=i, memory_mib=0,
                          compute_percent=100, exclusive=True) for i in (4, 5))
        ),
    )  # fmt: skip
    assert whole is not None and whole["AWS_NEURON_IDS"] == "4,5"
    assert "NEURON_RESOURCE_TYPE" not in whole

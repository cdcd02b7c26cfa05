"""Kunlun's placement rules: topology groups, the bubble score, vXPU slice sizes and sharing.

The rules are HAMi's (hami-protocol.md §8.2); each case says which one it pins. The pure
functions are checked directly, and the same rules through the plugin host, with the real
request parser reading a HAMi pod spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from xpushare.models import (
    ContainerView,
    Device,
    DeviceUsage,
    FitReason,
    NodeView,
    PodRef,
    PodView,
)
from xpushare.plugins import VendorHandle
from xpushare.testing.hosts import vendor_host
from xpushare_others.kunlun import fit as fitting
from xpushare_others.kunlun import plugin
from xpushare_others.kunlun.topology import score, select

XPU = "kunlunxin.com/xpu"
VXPU = "kunlunxin.com/vxpu"
VMEM = "kunlunxin.com/vxpu-memory"


@pytest.mark.parametrize(
    ("free", "count", "picked"),
    [
        # A half whose free count is the best fit; for one XPU the order is 1, 3, 2, 4 free.
        (range(8), 1, [0]),
        ({1, 2, 3, 4}, 1, [4]),
        ({0, 1, 2, 4, 5, 6, 7}, 1, [0]),
        ({0, 1, 4, 5, 6}, 1, [4]),
        ({0, 1, 2, 3, 4, 5}, 2, [4, 5]),
        ({0, 1, 2, 4, 5, 6}, 2, [0, 1]),
        (range(8), 4, [0, 1, 2, 3]),
        ({0, 1, 2, 3, 5}, 4, [0, 1, 2, 3]),
        # No half has room: a cross pair i, i+4 ...
        ({1, 5}, 2, [1, 5]),
        ({3, 7}, 2, [3, 7]),
        ({0, 3, 7}, 2, [0, 3]),
        ({0, 7}, 2, None),
        ({1, 6}, 2, None),
        # ... or a linked quad across the halves, in HAMi's order.
        ({0, 1, 4, 5}, 4, [0, 1, 4, 5]),
        ({0, 2, 3, 6, 7}, 4, [2, 3, 6, 7]),
        ({0, 2, 4, 6, 1}, 4, [0, 2, 4, 6]),
        ({0, 1, 3, 4, 5, 7}, 4, [0, 1, 4, 5]),
        # Six free and one quad fits: taken though the two left are not linked.
        ({0, 1, 2, 5, 6, 7}, 4, [1, 2, 5, 6]),
        ({0, 1, 2, 4, 6, 7}, 4, [0, 2, 4, 6]),
        ({0, 1, 6, 7}, 4, None),
        # Eight means the whole board; 3, 5, 6 and 7 are no group.
        (range(8), 8, list(range(8))),
        (range(7), 8, None),
        (range(8), 3, None),
        (range(8), 6, None),
    ],
)
def test_topology_groups(free: Any, count: int, picked: list[int] | None) -> None:
    assert select(free, count) == picked


@pytest.mark.parametrize(
    ("busy", "chosen", "expected"),
    [
        ([0, 1, 2, 3, 4], [4, 5, 6, 7], 3000),  # one bubble less than before
        ([0, 1, 2, 3], [4, 5, 6, 7], 2000),  # as many
        ([0, 1, 2], [3], 1000),  # one more
        ([], [0], 0),  # two more: a lone XPU breaks both halves
        ([5], [0, 1, 2, 3], 1000),  # any other change scores as one more
    ],
)
def test_bubble_score(busy: list[int], chosen: list[int], expected: int) -> None:
    assert score(busy, chosen) == pytest.approx(expected / 3000)


def _node(
    vendor: str, count: int = 8, overrides: dict[int, dict[str, Any]] | None = None
) -> NodeView:
    devices = tuple(
        Device(
            vendor=vendor,
            id=f"node-a-kunlun-{i}",
            index=i,
            model="P800",
            memory_mib=98304,
            share_slots=1 if vendor == "kunlun" else 4,
            **(overrides or {}).get(i, {}),
        )
        for i in range(count)
    )
    return NodeView(name="node-a", devices=devices)


@pytest.fixture
def hosts() -> Any:
    made: list[Any] = []

    def make(vendor: str) -> VendorHandle:
        obj = plugin.vxpu if vendor == "kunlun-vxpu" else plugin.xpu
        made.append(vendor_host(vendor, obj, node_name=None))
        return made[-1].vendor(vendor)

    yield make
    for host in made:
        host.close()


def _request(handle: VendorHandle, annotations: dict[str, str] | None = None, **limits: str) -> Any:
    c = ContainerView(name="main", limits=limits)
    pod = PodView(ref=PodRef(name="p"), annotations=annotations or {}, containers=(c,))
    return handle.resource_request(pod=pod, container=c)


def _fit(handle: VendorHandle, request: Any, node: NodeView, usage: dict[str, Any]) -> Any:
    return handle.fit(request=request, node=node, usage=usage, device_order=())


def _busy(*indices: int, memory: int = 98304) -> dict[str, DeviceUsage]:
    return {
        f"node-a-kunlun-{i}": DeviceUsage(
            device_id=f"node-a-kunlun-{i}", used_slots=1, used_memory_mib=memory
        )
        for i in indices
    }


def test_whole_xpus_take_idle_xpus_in_a_topology_group(hosts: Callable[..., Any]) -> None:
    handle = hosts("kunlun")
    request = _request(handle, **{XPU: "2"})
    assert request.exclusive and request.memory_mib is None
    # Halves 0-3 and 4-7 both broken: only the cross pair 3-7 is left whole.
    usage = _busy(0, 1, 2, 4, 5, 6)
    result = _fit(handle, request, _node("kunlun"), usage)
    assert result.fits and [s.index for s in result.devices] == [3, 7]
    assert all(s.exclusive and s.memory_mib == 98304 for s in result.devices)
    assert result.reasons == {FitReason.EXCLUSIVE_CONFLICT: 6}
    refused = _fit(handle, request, _node("kunlun"), _busy(0, 1, 2, 4, 5, 7))
    assert not refused.fits and "no Kunlun topology group of 2" in refused.explain()
    assert handle.score(request=request, node=_node("kunlun"), fit=result, usage=usage) == 0.0


def test_counts_outside_the_groups_never_fit(hosts: Callable[..., Any]) -> None:
    handle = hosts("kunlun")
    result = _fit(handle, _request(handle, **{XPU: "3"}), _node("kunlun"), {})
    assert not result.fits and "1, 2, 4 or 8 XPUs" in result.explain()


def test_hami_uuid_annotations_select_xpus(hosts: Callable[..., Any]) -> None:
    handle = hosts("kunlun")
    request = _request(
        handle,
        {
            "baidu.com/nouse-gpuuuid": "node-a-kunlun-0",
            "hami.io/no-use-xpu-uuid": "node-a-kunlun-1",
        },
        **{XPU: "1"},
    )
    assert set(request.uuids_exclude) >= {"node-a-kunlun-0", "node-a-kunlun-1"}
    result = _fit(handle, request, _node("kunlun"), {})
    # 0 and 1 excluded: the lower half has two free, the upper four; one XPU prefers 2 over 4.
    assert [s.index for s in result.devices] == [2]
    assert result.reasons == {FitReason.UUID_MISMATCH: 2}
    only = _request(handle, {"hami.io/use-xpu-uuid": "node-a-kunlun-6"}, **{XPU: "1"})
    assert [s.index for s in _fit(handle, only, _node("kunlun"), {}).devices] == [6]


def test_unhealthy_xpus_are_never_free(hosts: Callable[..., Any]) -> None:
    handle = hosts("kunlun")
    node = _node("kunlun", overrides={i: {"healthy": False} for i in (0, 1, 2, 3)})
    result = _fit(handle, _request(handle, **{XPU: "4"}), node, {})
    assert [s.index for s in result.devices] == [4, 5, 6, 7]
    assert result.reasons == {FitReason.UNHEALTHY: 4}


@pytest.mark.parametrize(
    ("memory", "slice_mib", "cores"),
    [
        ("10000", 24576, 25),
        ("24576", 24576, 25),
        ("24577", 49152, 50),
        ("60000", 98304, 100),
        ("24Gi", 24576, 25),
        ("200000", 98304, 100),
    ],
)
def test_vxpu_memory_is_rounded_to_a_slice_size(
    hosts: Callable[..., Any], memory: str, slice_mib: int, cores: int
) -> None:
    request = _request(hosts("kunlun-vxpu"), **{VXPU: "1", VMEM: memory})
    assert (request.memory_mib, request.compute_percent, request.exclusive) == (
        slice_mib,
        cores,
        False,
    )


def test_a_vxpu_without_memory_is_a_whole_xpu(hosts: Callable[..., Any]) -> None:
    request = _request(hosts("kunlun-vxpu"), **{VXPU: "1"})
    assert (request.memory_mib, request.memory_percent, request.compute_percent) == (None, 100, 100)


def test_vxpu_memory_must_be_a_number(hosts: Callable[..., Any]) -> None:
    with pytest.raises(ValueError, match=r"kunlunxin.com/vxpu-memory must be a whole number"):
        _request(hosts("kunlun-vxpu"), **{VXPU: "1", VMEM: "4Gx"})


def test_an_xpu_is_shared_only_by_slices_of_one_size(hosts: Callable[..., Any]) -> None:
    handle = hosts("kunlun-vxpu")
    small = _request(handle, **{VXPU: "1", VMEM: "24576"})
    node = _node("kunlun-vxpu", count=2)
    # XPU 0 holds one 49152 slice, XPU 1 one 24576 slice: a 24576 slice goes to XPU 1 only.
    usage = _busy(0, memory=49152) | _busy(1, memory=24576)
    result = _fit(handle, small, node, usage)
    assert [s.index for s in result.devices] == [1] and result.devices[0].memory_mib == 24576
    assert result.devices[0].compute_percent == 25 and not result.devices[0].exclusive
    assert result.reasons == {FitReason.PARTITION_UNAVAILABLE: 1}
    full = {"node-a-kunlun-1": DeviceUsage(device_id="x", used_slots=4, used_memory_mib=98304)}
    refused = _fit(handle, small, node, usage | full)
    assert not refused.fits
    assert refused.reasons[FitReason.SLOTS_EXHAUSTED] == 1
    half = _request(handle, **{VXPU: "1", VMEM: "49152"})
    two = {"node-a-kunlun-0": DeviceUsage(device_id="x", used_slots=2, used_memory_mib=98304)}
    # XPU 0's memory is all booked by two 49152 slices; XPU 1 holds a slice of another size.
    crowded = _fit(handle, half, node, two | _busy(1, memory=24576))
    assert not crowded.fits
    assert crowded.reasons[FitReason.INSUFFICIENT_MEMORY] == 1
    assert crowded.reasons[FitReason.PARTITION_UNAVAILABLE] == 1


def test_mutex_policy_takes_only_idle_xpus(hosts: Callable[..., Any]) -> None:
    handle = hosts("kunlun-vxpu")
    request = _request(
        handle, {"hami.io/gpu-scheduler-policy": "binpack,mutex"}, **{VXPU: "1", VMEM: "24576"}
    )
    assert request.exclusive
    node = _node("kunlun-vxpu", count=2)
    result = _fit(handle, request, node, _busy(0, memory=24576))
    assert [s.index for s in result.devices] == [1] and result.devices[0].exclusive
    assert result.reasons == {FitReason.EXCLUSIVE_CONFLICT: 1}
    assert handle.score(request=request, node=node, fit=result, usage={}) is None


def test_vxpus_follow_the_topology_groups_too(hosts: Callable[..., Any]) -> None:
    handle = hosts("kunlun-vxpu")
    request = _request(handle, **{VXPU: "2", VMEM: "24576"})
    # Every XPU but 2 and 6 holds a 49152 slice: only the cross pair 2-6 can take 24576.
    usage = _busy(0, 1, 3, 4, 5, 7, memory=49152)
    result = _fit(handle, request, _node("kunlun-vxpu"), usage)
    assert [s.index for s in result.devices] == [2, 6]


def test_the_webhook_writes_the_rounded_size_back(hosts: Callable[..., Any]) -> None:
    handle = hosts("kunlun-vxpu")
    c = ContainerView(name="main", limits={VXPU: "1", VMEM: "30000"})
    pod = PodView(ref=PodRef(name="p"), containers=(c,))
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    patches = handle.mutate_admission(pod=pod, container=c, index=0, request=request)
    assert [(p.op, p.path, p.value) for p in patches] == [
        ("replace", "/spec/containers/0/resources/limits/kunlunxin.com~1vxpu-memory", "49152"),
        ("add", "/spec/containers/0/resources/requests", {VMEM: "49152"}),
    ]


def test_cuts_stay_within_the_drivers_32_handles(hosts: Callable[..., Any]) -> None:
    """Kunlun's rule: 32 handles a node, one per XPU and one per vXPU of each cut XPU."""
    handle = hosts("kunlun-vxpu")
    quarters = _request(handle, **{VXPU: "4", VMEM: "24576"})
    node = _node("kunlun-vxpu")
    # Half 0-3 cut into quarters: 8 + 4 x 4 = 24 handles; cutting 4-7 too would need 40.
    usage = _busy(0, 1, 2, 3, memory=24576)
    assert fitting.handles(node, usage) == 24
    assert [s.index for s in _fit(handle, quarters, node, usage).devices] == [0, 1, 2, 3]
    # 4-7 in quarters, 0 full of quarters, 1 in halves: 8 + 16 + 4 + 2 = 30 handles. HAMi's
    # graph would cut idle XPU 2 (the lower half has two that fit): 34. XPU 4 is cut already.
    crowded = _busy(4, 5, 6, 7, memory=24576) | _busy(1, memory=49152)
    crowded["node-a-kunlun-0"] = DeviceUsage(device_id="x", used_slots=4, used_memory_mib=98304)
    assert fitting.handles(node, crowded) == 30
    one = _request(handle, **{VXPU: "1", VMEM: "24576"})
    assert [s.index for s in _fit(handle, one, node, crowded).devices] == [4]
    assert [s.index for s in fitting.fit(one, node, crowded, max_handles=34).devices] == [2]
    full = {
        f"node-a-kunlun-{i}": DeviceUsage(device_id="x", used_slots=4, used_memory_mib=98304)
        for i in range(4)
    }
    refused = _fit(handle, quarters, node, full)
    assert not refused.fits and refused.reasons[FitReason.PARTITION_UNAVAILABLE] == 1
    assert "pass the 32 device handles of the node's Kunlun driver (24 in use" in (
        refused.explain()
    )
    # Halves cost two handles each: the other half still fits (24 + 4 x 2 = 32).
    halves = _request(handle, **{VXPU: "4", VMEM: "49152"})
    assert [s.index for s in _fit(handle, halves, node, full).devices] == [4, 5, 6, 7]
    # A whole XPU as a vXPU cuts nothing.
    whole = _request(handle, **{VXPU: "4", VMEM: "98304"})
    assert _fit(handle, whole, node, full).fits
    # HAMi's guide: eight XPUs cut into halves fit, into quarters they do not.
    assert _fit(handle, _request(handle, **{VXPU: "8", VMEM: "49152"}), node, {}).fits
    eight = _fit(handle, _request(handle, **{VXPU: "8", VMEM: "24576"}), node, {})
    assert not eight.fits and "32 device handles" in eight.explain()


def test_the_handle_budget_is_a_setting(hosts: Callable[..., Any]) -> None:
    handle = hosts("kunlun-vxpu")
    request = _request(handle, **{VXPU: "1", VMEM: "24576"})
    node = _node("kunlun-vxpu", count=2)
    assert fitting.fit(request, node, {}, max_handles=6).fits  # 2 + 4
    assert not fitting.fit(request, node, {}, max_handles=5).fits

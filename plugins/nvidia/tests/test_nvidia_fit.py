"""Scheduler side: NVLink-aware choice of several GPUs, scoring, and MIG-safe placement."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from fake_nvml import FakeNvml, Gpu, uuid
from nvidia_kit import NODE, base_config

from xpushare.models import (
    ContainerRequest,
    Device,
    DeviceSlice,
    DeviceUsage,
    FitReason,
    FitResult,
    NodeView,
)
from xpushare.placement import Placer
from xpushare.plugins import VendorHandle
from xpushare.scheduling import PodRequest, UsageLedger
from xpushare.testing.hosts import VendorHosts
from xpushare_nvidia import plugin


def ask(count: int = 1, **kw: object) -> ContainerRequest:
    return ContainerRequest(vendor="nvidia", count=count, **kw)  # type: ignore[arg-type]


def node(devices: Sequence[Device]) -> NodeView:
    return NodeView(name="gpu-node-1", devices=tuple(devices))


def picked(result: FitResult) -> list[str]:
    return [s.device_id for s in result.devices]


@pytest.fixture
def islands(nvidia: Callable[..., VendorHandle], fake: FakeNvml) -> tuple[VendorHandle, NodeView]:
    """Four GPUs: NVLink pairs 0-1 and 2-3; everything else over PCIe."""
    fake.add_gpus(4, numa=[0, 0, 1, 1])
    fake.nvlink(0, 1, 4)
    fake.nvlink(2, 3, 4)
    handle = nvidia()
    return handle, node(handle.detect())


def test_requests_the_default_handles_are_left_to_it(
    islands: tuple[VendorHandle, NodeView],
) -> None:
    handle, view = islands
    one = ask(1, memory_mib=1000)
    assert plugin.xpushare_fit(one, view, {}, [uuid(2)], 1.0) is None
    # The host falls through to the core's default, which follows the policy's order.
    assert picked(handle.fit(request=one, node=view, usage={}, device_order=[uuid(2)])) == [uuid(2)]


def test_several_gpus_go_to_an_nvlink_connected_set(
    islands: tuple[VendorHandle, NodeView],
) -> None:
    handle, view = islands
    # The policy prefers 0, then 2: a plain walk would take 0 and 2, joined only by PCIe.
    order = [uuid(0), uuid(2), uuid(1), uuid(3)]
    result = handle.fit(request=ask(2, memory_mib=1000), node=view, usage={}, device_order=order)
    assert result.fits
    assert picked(result) == [uuid(0), uuid(1)]
    assert result.devices[0] == DeviceSlice(
        device_id=uuid(0), index=0, memory_mib=1000, compute_percent=0
    )


def test_the_linked_set_must_still_fit(islands: tuple[VendorHandle, NodeView]) -> None:
    handle, view = islands
    usage = {uuid(1): DeviceUsage(device_id=uuid(1), used_slots=1, used_memory_mib=81000)}
    order = [uuid(0), uuid(2), uuid(1), uuid(3)]
    result = handle.fit(request=ask(2, memory_mib=4000), node=view, usage=usage, device_order=order)
    assert picked(result) == [uuid(2), uuid(3)]
    assert result.reasons == {FitReason.INSUFFICIENT_MEMORY: 1}


def test_not_enough_fitting_gpus_says_why(islands: tuple[VendorHandle, NodeView]) -> None:
    handle, view = islands
    usage = {
        uuid(i): DeviceUsage(device_id=uuid(i), used_slots=1, exclusive=True) for i in range(3)
    }
    result = handle.fit(request=ask(2), node=view, usage=usage, device_order=[])
    assert not result.fits
    assert result.reasons == {FitReason.HELD_EXCLUSIVELY: 3, FitReason.NOT_ENOUGH_FIT: 1}


def test_numa_binding_keeps_the_set_on_one_node(islands: tuple[VendorHandle, NodeView]) -> None:
    handle, view = islands
    result = handle.fit(
        request=ask(2, numa_bind=True), node=view, usage={}, device_order=[uuid(3), uuid(0)]
    )
    assert sorted(picked(result)) == [uuid(2), uuid(3)]


def test_exclusive_requests_take_whole_idle_gpus(islands: tuple[VendorHandle, NodeView]) -> None:
    handle, view = islands
    usage = {uuid(0): DeviceUsage(device_id=uuid(0), used_slots=1, used_memory_mib=10)}
    result = handle.fit(request=ask(2, exclusive=True), node=view, usage=usage, device_order=[])
    assert picked(result) == [uuid(2), uuid(3)]
    assert all(s.exclusive and s.memory_mib == 81920 for s in result.devices)
    assert result.reasons == {FitReason.EXCLUSIVE_CONFLICT: 1}


def fitted(*ids: str) -> FitResult:
    return FitResult(
        fits=True,
        devices=tuple(DeviceSlice(device_id=i, memory_mib=1, compute_percent=0) for i in ids),
    )


def test_score_prefers_nodes_with_nvlinked_sets(islands: tuple[VendorHandle, NodeView]) -> None:
    handle, view = islands
    pcie_only = node(
        [
            d.model_copy(update={"links": tuple(k for k in d.links if k.kind != "nvlink")})
            for d in view.devices
        ]
    )
    linked = handle.score(request=ask(2), node=view, fit=fitted(uuid(0), uuid(1)), usage={})
    plain = handle.score(request=ask(2), node=pcie_only, fit=fitted(uuid(0), uuid(1)), usage={})
    assert linked is not None and plain is not None
    assert linked > 0.7 > plain > 0
    # One GPU has no links to rate.
    assert handle.score(request=ask(1), node=view, fit=fitted(uuid(0)), usage={}) is None


def test_score_rates_the_set_this_plugin_would_pick(
    islands: tuple[VendorHandle, NodeView],
) -> None:
    handle, view = islands
    # The placer rates the plain walk's picks (0 and 2, PCIe only); the plugin's fit would
    # take an NVLink pair on this node, and the score says so.
    walk = handle.score(request=ask(2), node=view, fit=fitted(uuid(0), uuid(2)), usage={})
    best = handle.score(request=ask(2), node=view, fit=fitted(uuid(0), uuid(1)), usage={})
    assert walk == best
    # With GPU 1 and 3 full, no NVLink pair is left: the PCIe pair is what the node offers.
    full = {
        uuid(i): DeviceUsage(device_id=uuid(i), used_slots=10, used_memory_mib=81920)
        for i in (1, 3)
    }
    left = handle.score(request=ask(2), node=view, fit=fitted(uuid(0), uuid(2)), usage=full)
    assert left is not None and best is not None and left < best


def test_eight_of_sixteen_gpus_find_the_nvlink_island(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    # C(16, 8) sets are too many to try each: the greedy search must still find an island.
    fake.add_gpus(16)
    for island in (range(0, 8), range(8, 16)):
        for a in island:
            for b in island:
                if a < b:
                    fake.nvlink(a, b, 1)
    handle = nvidia()
    view = node(handle.detect())
    order = [uuid(i) for i in (0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15)]
    result = handle.fit(request=ask(8), node=view, usage={}, device_order=order)
    assert sorted(picked(result)) == [uuid(i) for i in range(8)]


@pytest.fixture
def mig_view(nvidia: Callable[..., VendorHandle], fake: FakeNvml) -> tuple[VendorHandle, NodeView]:
    """GPU 0 in MIG mode (one 3g.40gb, two 1g.10gb), GPU 1 whole."""
    fake.add_gpus(2, Gpu(name="NVIDIA A100-SXM4-80GB", sm_count=98))
    fake.enable_mig(0)
    fake.add_mig(0, "3g.40gb", 40192, 42, 3, gi=1)
    fake.add_mig(0, "1g.10gb", 9856, 14, 1, gi=9)
    fake.add_mig(0, "1g.10gb", 9856, 14, 1, gi=10)
    handle = nvidia()
    return handle, node(handle.detect())


def test_a_mig_gpu_is_never_booked_as_a_whole(mig_view: tuple[VendorHandle, NodeView]) -> None:
    handle, view = mig_view
    mig_first = [uuid(0), uuid(1)]
    shared = handle.fit(
        request=ask(1, memory_mib=1000), node=view, usage={}, device_order=mig_first
    )
    assert picked(shared) == [uuid(1)]
    assert shared.reasons == {FitReason.PARTITION_UNAVAILABLE: 1}
    whole = handle.fit(request=ask(1, exclusive=True), node=view, usage={}, device_order=mig_first)
    assert picked(whole) == [uuid(1)]
    busy = {uuid(1): DeviceUsage(device_id=uuid(1), used_slots=1, exclusive=True)}
    refused = handle.fit(request=ask(1, exclusive=True), node=view, usage=busy, device_order=[])
    assert not refused.fits
    assert "GPU(s) in MIG mode have no free MIG instance" in refused.explain()
    assert refused.reasons[FitReason.EXCLUSIVE_CONFLICT] == 1  # the MIG GPU


def test_with_the_whole_gpus_taken_memory_picks_the_smallest_mig_instance(
    mig_view: tuple[VendorHandle, NodeView],
) -> None:
    # HAMi's MIG mode: a plain memory request lands on the smallest profile that holds it.
    handle, view = mig_view
    busy = {uuid(1): DeviceUsage(device_id=uuid(1), used_slots=1, exclusive=True)}

    def fit(memory: int, count: int = 1, usage: dict[str, DeviceUsage] = busy) -> FitResult:
        return handle.fit(
            request=ask(count, memory_mib=memory), node=view, usage=usage, device_order=[]
        )

    small = fit(9000)
    assert [(s.device_id, s.partition, s.memory_mib) for s in small.devices] == [
        (uuid(0), "1g.10gb", 9856)
    ]
    assert fit(20000).devices[0].partition == "3g.40gb"
    # Two slices: both 1g.10gb instances; a third slice takes the next profile that holds it.
    assert [s.partition for s in fit(9000, 2).devices] == ["1g.10gb", "1g.10gb"]
    assert [s.partition for s in fit(9000, 3).devices] == ["1g.10gb", "1g.10gb", "3g.40gb"]
    assert not fit(9000, 4).fits
    # 50 GiB is more than any instance; a request without memory wants the whole 80 GiB.
    assert not fit(50000).fits
    no_memory = handle.fit(request=ask(1), node=view, usage=busy, device_order=[])
    assert not no_memory.fits
    # Instances already booked count.
    both_small = DeviceUsage(device_id=uuid(0), partitions_in_use=("1g.10gb", "1g.10gb"))
    assert fit(9000, usage={**busy, uuid(0): both_small}).devices[0].partition == "3g.40gb"


def test_mig_profiles_are_booked_up_to_the_instances_that_exist(
    mig_view: tuple[VendorHandle, NodeView],
) -> None:
    handle, view = mig_view
    result = handle.fit(request=ask(2, partition="1g.10gb"), node=view, usage={}, device_order=[])
    assert result.fits
    assert (
        result.devices
        == (
            DeviceSlice(
                device_id=uuid(0), memory_mib=9856, compute_percent=15, partition="1g.10gb"
            ),
        )
        * 2
    )
    one_taken = {
        uuid(0): DeviceUsage(device_id=uuid(0), used_slots=1, partitions_in_use=("1g.10gb",))
    }
    assert handle.fit(
        request=ask(1, partition="1g.10gb"), node=view, usage=one_taken, device_order=[]
    ).fits
    refused = handle.fit(
        request=ask(2, partition="1g.10gb"), node=view, usage=one_taken, device_order=[]
    )
    assert not refused.fits
    assert "no 2 free MIG instance(s) of profile 1g.10gb" in refused.explain()
    assert refused.reasons[FitReason.PARTITION_UNAVAILABLE] == 1  # the whole GPU 1


def test_a_profile_the_node_lacks_does_not_fit(mig_view: tuple[VendorHandle, NodeView]) -> None:
    handle, view = mig_view
    result = handle.fit(request=ask(1, partition="7g.80gb"), node=view, usage={}, device_order=[])
    assert not result.fits
    assert result.reasons == {FitReason.PARTITION_UNAVAILABLE: 2}


def test_unhealthy_mig_gpus_are_skipped(mig_view: tuple[VendorHandle, NodeView]) -> None:
    handle, view = mig_view
    sick = node([view.devices[0].model_copy(update={"healthy": False}), view.devices[1]])
    result = handle.fit(request=ask(1, partition="1g.10gb"), node=sick, usage={}, device_order=[])
    assert not result.fits
    assert result.reasons[FitReason.UNHEALTHY] == 1


def test_fit_applies_only_where_mig_or_nvlink_can_change_the_answer(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(4)
    plain = nvidia().detect()
    assert plugin.xpushare_fit_applies(plain) is False
    # The promise the hook makes to the core: on such a node every request without a
    # partition is left to the default, whatever its count, memory, compute or exclusivity.
    view = node(plain)
    for count in (1, 2, 4):
        for kw in ({}, {"memory_mib": 1000}, {"compute_percent": 30}, {"exclusive": True}):
            assert plugin.xpushare_fit(ask(count, **kw), view, {}, [], 1.0) is None


def test_fit_applies_on_nvlink_nodes(islands: tuple[VendorHandle, NodeView]) -> None:
    assert plugin.xpushare_fit_applies(islands[1].devices) is True


def test_fit_applies_on_mig_nodes(mig_view: tuple[VendorHandle, NodeView]) -> None:
    assert plugin.xpushare_fit_applies(mig_view[1].devices) is True


def test_filter_says_why_a_mig_gpu_with_too_few_free_instances_is_out(
    fake: FakeNvml, driver_root: Path, hami_dir: Path
) -> None:
    # One 1g.10gb of GPU 0 is taken: a pod asking for two gets one, and /filter must say so
    # (the plugin's message), not only that the whole GPU 1 has no such partition.
    fake.add_gpus(2, Gpu(name="NVIDIA A100-SXM4-80GB", sm_count=98))
    fake.enable_mig(0)
    fake.add_mig(0, "3g.40gb", 40192, 42, 3, gi=1)
    fake.add_mig(0, "1g.10gb", 9856, 14, 1, gi=9)
    fake.add_mig(0, "1g.10gb", 9856, 14, 1, gi=10)
    with VendorHosts("nvidia", plugin, node_name=NODE, strict=True) as hosts:
        host = hosts.host(base_config(driver_root, hami_dir))
        handle = host.vendor("nvidia")
        handle.startup()
        ledger = UsageLedger()
        ledger.set_node(NODE, handle.detect())
        placer = Placer(ledger, "binpack", host=host)
        one = PodRequest.build([ask(1, partition="1g.10gb")])
        placer.commit("default/first", one, placer.decide(one, NODE))
        two = PodRequest.build([ask(2, partition="1g.10gb")])
        result = placer.filter(two, [NODE])
        assert result.fits == []
        message = result.failed[NODE]
        assert "no 2 free MIG instance(s) of profile 1g.10gb" in message
        assert FitReason.NOT_ENOUGH_FIT.value in message
        assert "nvidia x2" in message
        # `xpushare fit`'s view of the same node says the same.
        (refused,) = placer.explain(two, NODE).containers
        assert "no 2 free MIG instance(s) of profile 1g.10gb" in refused.explain()

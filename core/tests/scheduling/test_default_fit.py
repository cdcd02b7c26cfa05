"""The core's default fit: each of HAMi's per-device checks, exclusivity, NUMA, over-commit."""

from __future__ import annotations

from typing import Any

import pytest

from xpushare.models import (
    ContainerRequest,
    Device,
    DeviceUsage,
    FitReason,
    NodeView,
    PartitionProfile,
)
from xpushare.scheduling import default_fit


def gpu(i: int, **kw: Any) -> Device:
    base: dict[str, Any] = {
        "vendor": "acme",
        "id": f"GPU-{i}",
        "index": i,
        "model": "ACME A100-40GB",
        "memory_mib": 40000,
        "share_slots": 4,
    }
    base.update(kw)
    return Device(**base)


def node(*devices: Device) -> NodeView:
    return NodeView(name="n1", devices=devices)


def used(device_id: str, slots: int = 1, mem: int = 0, compute: int = 0, **kw: Any) -> DeviceUsage:
    return DeviceUsage(
        device_id=device_id,
        used_slots=slots,
        used_memory_mib=mem,
        used_compute_percent=compute,
        **kw,
    )


def req(**kw: Any) -> ContainerRequest:
    return ContainerRequest(vendor="acme", **kw)


def test_a_free_device_fits_with_the_memory_and_compute_asked() -> None:
    result = default_fit(req(memory_mib=8000, compute_percent=30), node(gpu(0)), {})
    assert result.fits
    [s] = result.devices
    assert (s.device_id, s.memory_mib, s.compute_percent, s.exclusive) == ("GPU-0", 8000, 30, False)


@pytest.mark.parametrize(
    ("device", "usage", "request_kw", "reason"),
    [
        (gpu(0, healthy=False), {}, {}, FitReason.UNHEALTHY),
        (gpu(0), {}, {"models_include": ("H100",)}, FitReason.MODEL_MISMATCH),
        (gpu(0), {}, {"models_exclude": ("a100",)}, FitReason.MODEL_MISMATCH),
        (gpu(0), {}, {"uuids_include": ("GPU-9",)}, FitReason.UUID_MISMATCH),
        (gpu(0), {}, {"uuids_exclude": ("GPU-0",)}, FitReason.UUID_MISMATCH),
        (gpu(0, share_slots=2), {"GPU-0": used("GPU-0", slots=2)}, {}, FitReason.SLOTS_EXHAUSTED),
        (gpu(0), {"GPU-0": used("GPU-0", exclusive=True)}, {}, FitReason.HELD_EXCLUSIVELY),
        (
            gpu(0),
            {"GPU-0": used("GPU-0", mem=10)},
            {"exclusive": True},
            FitReason.EXCLUSIVE_CONFLICT,
        ),
        (
            gpu(0),
            {"GPU-0": used("GPU-0", mem=35000)},
            {"memory_mib": 6000},
            FitReason.INSUFFICIENT_MEMORY,
        ),
        (
            gpu(0),
            {"GPU-0": used("GPU-0", mem=1, compute=80)},
            {"memory_mib": 1, "compute_percent": 30},
            FitReason.INSUFFICIENT_COMPUTE,
        ),
        (
            gpu(0),
            {"GPU-0": used("GPU-0", mem=1, compute=100)},
            {"memory_mib": 1},
            FitReason.COMPUTE_EXHAUSTED,
        ),
        (gpu(0), {}, {"partition": "1g.10gb"}, FitReason.PARTITION_UNAVAILABLE),
    ],
)
def test_each_check_rejects_with_its_reason(
    device: Device, usage: dict[str, DeviceUsage], request_kw: dict[str, Any], reason: FitReason
) -> None:
    result = default_fit(req(**request_kw), node(device), usage)
    assert not result.fits
    assert result.reasons[reason] == 1
    assert reason.value in result.explain()


def test_checks_run_in_hamis_order_first_failure_counts() -> None:
    # Unhealthy AND wrong model: counted as unhealthy only (HAMi checks health first).
    result = default_fit(req(models_include=("H100",)), node(gpu(0, healthy=False)), {})
    assert dict(result.reasons) == {FitReason.UNHEALTHY: 1, FitReason.NOT_ENOUGH_FIT: 1}


def test_model_match_is_case_insensitive_substring() -> None:
    assert default_fit(req(models_include=("a100",)), node(gpu(0)), {}).fits


def test_memory_percent_is_of_the_physical_device() -> None:
    result = default_fit(req(memory_percent=25), node(gpu(0)), {})
    assert result.devices[0].memory_mib == 10000
    # With 2x over-commit a percent still means a share of the real memory ...
    result = default_fit(req(memory_percent=25), node(gpu(0)), {}, memory_overcommit=2.0)
    assert result.devices[0].memory_mib == 10000


def test_no_memory_asked_means_the_whole_device_as_in_hami() -> None:
    result = default_fit(req(compute_percent=10), node(gpu(0)), {"GPU-0": used("GPU-0", mem=1)})
    assert not result.fits and result.reasons[FitReason.INSUFFICIENT_MEMORY] == 1
    assert default_fit(req(compute_percent=10), node(gpu(0)), {}).devices[0].memory_mib == 40000


def test_memory_overcommit_lets_more_be_booked() -> None:
    usage = {"GPU-0": used("GPU-0", mem=30000)}
    assert not default_fit(req(memory_mib=20000), node(gpu(0)), usage).fits
    assert default_fit(req(memory_mib=20000), node(gpu(0)), usage, memory_overcommit=1.5).fits


def test_compute_overcommit_lets_more_compute_be_booked() -> None:
    usage = {"GPU-0": used("GPU-0", mem=1, compute=90)}
    assert not default_fit(req(memory_mib=1, compute_percent=50), node(gpu(0)), usage).fits
    assert default_fit(
        req(memory_mib=1, compute_percent=50), node(gpu(0)), usage, compute_overcommit=2.0
    ).fits


def test_exclusive_takes_a_whole_unused_device() -> None:
    usage = {"GPU-0": used("GPU-0", mem=100, compute=10)}
    result = default_fit(req(exclusive=True), node(gpu(0), gpu(1)), usage)
    assert result.fits
    [s] = result.devices
    assert (s.device_id, s.exclusive, s.compute_percent, s.memory_mib) == (
        "GPU-1",
        True,
        100,
        40000,
    )
    assert result.reasons[FitReason.EXCLUSIVE_CONFLICT] == 1


def test_all_the_compute_is_exclusive_only_on_a_device_not_over_committed() -> None:
    # HAMi: exclusive only where Totalcore == 100; with deviceCoreScaling 2 (200 cores) a
    # request of 100 books half the cores beside the pods already there (issue 36).
    usage = {"GPU-0": used("GPU-0", mem=1000, compute=50)}
    shared = default_fit(
        req(exclusive=True, compute_percent=100, memory_mib=8000),
        node(gpu(0)),
        usage,
        compute_overcommit=2.0,
    )
    assert shared.fits, shared.explain()
    [s] = shared.devices
    assert (s.exclusive, s.compute_percent, s.memory_mib) == (False, 100, 8000)
    # A second request of all the compute still fits beside one booked as a share there.
    full = {"GPU-0": used("GPU-0", mem=0, compute=100)}
    assert default_fit(
        req(exclusive=True, compute_percent=100, memory_mib=1000),
        node(gpu(0)),
        full,
        compute_overcommit=2.0,
    ).fits
    # On a device of 100 % it is exclusive, as before.
    alone = default_fit(req(exclusive=True, compute_percent=100), node(gpu(0)), usage)
    assert not alone.fits
    assert alone.reasons == {FitReason.EXCLUSIVE_CONFLICT: 1, FitReason.NOT_ENOUGH_FIT: 1}


def test_device_count_too_few_devices_and_not_enough_fit() -> None:
    result = default_fit(req(count=3), node(gpu(0), gpu(1)), {})
    assert not result.fits and result.reasons[FitReason.TOO_FEW_DEVICES] == 1
    usage = {"GPU-1": used("GPU-1", mem=39000)}
    result = default_fit(req(count=2, memory_mib=2000), node(gpu(0), gpu(1)), usage)
    assert not result.fits
    assert result.reasons == {FitReason.INSUFFICIENT_MEMORY: 1, FitReason.NOT_ENOUGH_FIT: 1}


def test_device_order_is_followed() -> None:
    devices = node(gpu(0), gpu(1), gpu(2))
    result = default_fit(req(count=2, memory_mib=1), devices, {}, device_order=["GPU-2", "GPU-0"])
    assert [s.device_id for s in result.devices] == ["GPU-2", "GPU-0"]


def test_numa_binding_keeps_all_devices_on_one_numa_node() -> None:
    devices = node(
        gpu(0, numa_node=0), gpu(1, numa_node=0), gpu(2, numa_node=1), gpu(3, numa_node=1)
    )
    usage = {"GPU-0": used("GPU-0", mem=39000)}  # NUMA 0 has only one fitting device left
    result = default_fit(req(count=2, memory_mib=2000, numa_bind=True), devices, usage)
    assert result.fits
    assert sorted(s.device_id for s in result.devices) == ["GPU-2", "GPU-3"]
    # Without the binding the first two fitting devices in order are taken, across NUMA.
    loose = default_fit(req(count=2, memory_mib=2000), devices, usage)
    assert [s.device_id for s in loose.devices] == ["GPU-1", "GPU-2"]


def test_numa_binding_restarts_its_run_at_each_numa_change_as_hami_does() -> None:
    # Walked in the order given: NUMA 0, 1, 0. NUMA 0 has two fitting devices, but not next
    # to each other in the walk: HAMi restarts its picks at each NUMA change, so the pod does
    # not fit here either (the first NUMA node with room, the old rule, took GPU-0 and GPU-2).
    devices = node(gpu(0, numa_node=0), gpu(1, numa_node=1), gpu(2, numa_node=0))
    order = ["GPU-0", "GPU-1", "GPU-2"]
    result = default_fit(req(count=2, memory_mib=1, numa_bind=True), devices, {}, order)
    assert not result.fits
    assert result.reasons == {FitReason.NUMA_MISMATCH: 2}  # HAMi's NumaNotFit: 2 dropped
    # A run of one NUMA node that holds enough fits, even after a discarded one.
    order = ["GPU-1", "GPU-0", "GPU-2"]
    result = default_fit(req(count=2, memory_mib=1, numa_bind=True), devices, {}, order)
    assert [s.device_id for s in result.devices] == ["GPU-0", "GPU-2"]


def test_a_device_that_fails_the_checks_before_hamis_numa_check_keeps_the_run() -> None:
    # Unhealthy and model-mismatched devices are skipped before HAMi's NUMA check: they do
    # not break a run; a device refused later (here: full memory) does start its own run.
    sick = node(gpu(0, numa_node=0), gpu(1, numa_node=1, healthy=False), gpu(2, numa_node=0))
    assert default_fit(req(count=2, memory_mib=1, numa_bind=True), sick, {}).fits
    full = node(gpu(0, numa_node=0), gpu(1, numa_node=1), gpu(2, numa_node=0))
    usage = {"GPU-1": used("GPU-1", mem=40000)}
    result = default_fit(req(count=2, memory_mib=1, numa_bind=True), full, usage)
    assert not result.fits
    assert result.reasons[FitReason.NUMA_MISMATCH] == 1


def test_numa_binding_that_cannot_be_met_says_so() -> None:
    devices = node(gpu(0, numa_node=0), gpu(1, numa_node=1))
    result = default_fit(req(count=2, memory_mib=1, numa_bind=True), devices, {})
    assert not result.fits
    assert result.reasons[FitReason.NUMA_MISMATCH] == 1
    assert "not on one NUMA node" in result.explain()


def test_partition_profile_books_the_profiles_share() -> None:
    profile = PartitionProfile(name="1g.10gb", memory_mib=10000, compute_percent=14, max_count=2)
    device = gpu(0, partitions=(profile,))
    result = default_fit(req(partition="1g.10gb"), node(device), {})
    assert result.fits
    assert (result.devices[0].memory_mib, result.devices[0].partition) == (10000, "1g.10gb")
    full = {
        "GPU-0": used("GPU-0", slots=2, mem=20000, compute=28, partitions_in_use=("1g.10gb",) * 2)
    }
    assert default_fit(req(partition="1g.10gb"), node(device), full).reasons == {
        FitReason.PARTITION_UNAVAILABLE: 1,
        FitReason.NOT_ENOUGH_FIT: 1,
    }


def test_a_node_without_the_vendors_devices() -> None:
    other = Device(vendor="other", id="X", index=0, model="x", memory_mib=1)
    result = default_fit(req(), node(other), {})
    assert not result.fits and result.reasons == {FitReason.NO_DEVICES: 1}


def test_the_tally_covers_every_device_even_when_it_fits() -> None:
    devices = node(gpu(0, healthy=False), gpu(1), gpu(2))
    usage = {"GPU-1": used("GPU-1", slots=4)}
    result = default_fit(req(memory_mib=1), devices, usage)
    assert result.fits and result.devices[0].device_id == "GPU-2"
    assert result.reasons == {FitReason.UNHEALTHY: 1, FitReason.SLOTS_EXHAUSTED: 1}

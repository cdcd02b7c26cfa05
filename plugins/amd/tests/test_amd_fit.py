"""The AMD fit: compute units, partitions never double-booked, and the HAMi request defaults."""

from __future__ import annotations

from amd_fakes import amd_host
from hypothesis import given, settings
from hypothesis import strategies as st

from xpushare.models import (
    ContainerRequest,
    ContainerView,
    Device,
    DeviceUsage,
    FitReason,
    FitResult,
    NodeView,
    PodRef,
    PodView,
)
from xpushare_amd.fit import booked_percent, compute_units, fit, granted_units

PHYSICAL = "GPU-4d3a0f9e12ab55{:02x}"


def gpu(index: int, *, cus: int = 304, memory: int = 196608, numa: int = 0, **kw: object) -> Device:
    return Device(
        vendor="amd",
        id=PHYSICAL.format(index),
        index=index,
        model="AMD Instinct MI300X",
        memory_mib=memory,
        compute_units=cus,
        numa_node=numa,
        **kw,  # type: ignore[arg-type]
    )


def partition(physical: int, part: int, index: int) -> Device:
    return Device(
        vendor="amd",
        id=f"{PHYSICAL.format(physical)}-cpx{part}",
        index=index,
        model="AMD Instinct MI300X",
        memory_mib=24576,
        compute_units=38,
        mode="cpx",
        extra={"memory_partition": "NPS4", "uuid": f"uuid-{physical}-{part}"},
    )


def request(**kw: object) -> ContainerRequest:
    return ContainerRequest(vendor="amd", container="main", **kw)  # type: ignore[arg-type]


def run(req: ContainerRequest, devices: list[Device], usage: dict[str, DeviceUsage] | None = None):  # type: ignore[no-untyped-def]
    return fit(req, NodeView(name="node-a", devices=tuple(devices)), usage or {}, [], 1.0)


def used(device_id: str, **kw: object) -> DeviceUsage:
    return DeviceUsage(device_id=device_id, **kw)  # type: ignore[arg-type]


# -- compute units ---------------------------------------------------------------------------


def test_percent_becomes_whole_compute_units_booked_rounded_up() -> None:
    part = partition(1, 0, 0)  # 38 CUs
    assert compute_units(request(memory_mib=1024, compute_percent=10), 38) == 3
    assert booked_percent(request(memory_mib=1024, compute_percent=10), part) == 8  # 3/38
    assert compute_units(request(memory_mib=1024, compute_percent=1), 38) == 1  # at least one
    assert booked_percent(request(memory_mib=1024, compute_percent=1), part) == 3
    whole_memory = request(compute_percent=10)  # HAMi: the whole memory takes every CU
    assert compute_units(whole_memory, 38) == 38 and booked_percent(whole_memory, part) == 100


def test_a_gpu_full_in_compute_units_refuses_a_one_percent_request() -> None:
    # 98 % booked leaves 0.76 CU on a 38-CU partition: one CU (2.6 %) no longer fits, which
    # a plain percent check (98 + 1 <= 100) would have allowed.
    part = partition(1, 0, 0)
    result = run(
        request(memory_mib=512, compute_percent=1),
        [part],
        {part.id: used(part.id, used_slots=2, used_memory_mib=1024, used_compute_percent=98)},
    )
    assert not result.fits
    assert result.reasons[FitReason.INSUFFICIENT_COMPUTE] == 1
    ok = run(
        request(memory_mib=512, compute_percent=1),
        [part],
        {part.id: used(part.id, used_slots=2, used_memory_mib=1024, used_compute_percent=97)},
    )
    assert ok.fits and ok.devices[0].compute_percent == 3


@settings(max_examples=200, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=320),
    asks=st.lists(st.integers(min_value=1, max_value=100), min_size=1, max_size=12),
)
def test_bookings_never_hold_more_compute_units_than_the_gpu_has(
    total: int, asks: list[int]
) -> None:
    device = gpu(0, cus=total)
    booked = 0
    granted: list[int] = []
    for percent in asks:
        req = request(memory_mib=1, compute_percent=percent)
        u = {device.id: used(device.id, used_slots=0, used_compute_percent=booked)}
        result = run(req, [device], u)
        if not result.fits:
            continue
        piece = result.devices[0].compute_percent
        booked += piece
        units = granted_units(piece, total)
        assert units >= compute_units(req, total)  # never less than asked
        granted.append(units)
    assert booked <= 100
    assert sum(granted) <= total


# -- partitions --------------------------------------------------------------------------------


def test_each_partition_is_booked_once_for_exclusive_use() -> None:
    parts = [partition(1, p, p) for p in range(8)]
    first = run(request(exclusive=True, compute_percent=100), parts)
    assert [s.device_id for s in first.devices] == [parts[0].id]
    held = {parts[0].id: used(parts[0].id, used_slots=1, exclusive=True, used_compute_percent=100)}
    second = run(request(exclusive=True, compute_percent=100), parts, held)
    assert [s.device_id for s in second.devices] == [parts[1].id]
    assert second.reasons == {FitReason.HELD_EXCLUSIVELY: 1}


def test_a_gpu_held_under_another_partition_layout_is_refused_whole() -> None:
    # GPU 1 went from SPX to CPX while a pod still holds it whole: none of its partitions
    # may be booked; the other GPU still fits.
    devices = [gpu(0), *(partition(1, p, 1 + p) for p in range(8))]
    stale = {PHYSICAL.format(1): used(PHYSICAL.format(1), used_slots=1, used_memory_mib=8192)}
    order = [d.id for d in reversed(devices)]  # the policy would try the partitions first
    result = fit(
        request(memory_mib=1024, compute_percent=10),
        NodeView(name="n", devices=tuple(devices)),
        stale,
        order,
        1.0,
    )
    assert [s.device_id for s in result.devices] == [PHYSICAL.format(0)]
    assert result.reasons == {FitReason.PARTITION_UNAVAILABLE: 8}
    none_left = run(request(memory_mib=1024, count=2), devices[1:], stale)
    assert not none_left.fits
    assert "still held as GPU-4d3a0f9e12ab5501 from before its partition mode changed" in (
        none_left.message
    )


def test_a_whole_gpu_held_as_partitions_is_refused() -> None:
    stale_id = f"{PHYSICAL.format(1)}-cpx3"
    result = run(
        request(memory_mib=1024),
        [gpu(1)],
        {stale_id: used(stale_id, used_slots=1, used_memory_mib=1024)},
    )
    assert not result.fits and result.reasons[FitReason.PARTITION_UNAVAILABLE] == 1


def test_a_request_can_ask_for_a_partition_layout() -> None:
    devices = [gpu(0), partition(1, 0, 1)]
    assert [
        s.device_id for s in run(request(memory_mib=1024, partition="cpx"), devices).devices
    ] == [devices[1].id]
    assert run(request(memory_mib=1024, partition="cpx-nps4"), devices).fits
    refused = run(request(memory_mib=1024, partition="dpx"), devices)
    assert not refused.fits and refused.reasons[FitReason.PARTITION_UNAVAILABLE] == 2


# -- the usual checks ---------------------------------------------------------------------------


def test_memory_numa_and_constraints() -> None:
    devices = [gpu(0, numa=0), gpu(1, numa=1), gpu(2, numa=1)]
    full = {devices[1].id: used(devices[1].id, used_slots=1, used_memory_mib=196000)}
    result = run(
        request(memory_mib=4096, count=2, numa_bind=True, compute_percent=10), devices, full
    )
    assert not result.fits and FitReason.NUMA_MISMATCH in result.reasons
    assert result.reasons[FitReason.INSUFFICIENT_MEMORY] == 1
    by_uuid = run(
        request(memory_mib=1024, uuids_include=("uuid-1-2",)),
        [partition(1, p, p) for p in range(4)],
    )
    assert [s.device_id for s in by_uuid.devices] == [f"{PHYSICAL.format(1)}-cpx2"]
    too_many = run(request(memory_mib=1024, count=4), devices)
    assert too_many.reasons[FitReason.TOO_FEW_DEVICES] == 1
    excluded = run(request(memory_mib=1024, models_exclude=("mi300",)), devices)
    assert excluded.reasons == {FitReason.MODEL_MISMATCH: 3, FitReason.NOT_ENOUGH_FIT: 1}


def test_numa_binding_restarts_at_each_numa_change_in_the_walk_as_hamis() -> None:
    # NUMA 0, 1, 0 in the walk: NUMA 0's two GPUs are not one run (HAMi's rule, issue 36).
    devices = [gpu(0, numa=0), gpu(1, numa=1), gpu(2, numa=0)]
    ask = request(memory_mib=4096, count=2, numa_bind=True, compute_percent=10)
    split = run(ask, devices)
    assert not split.fits and split.reasons[FitReason.NUMA_MISMATCH] == 2
    together = fit(ask, NodeView(name="n", devices=tuple(devices)), {}, [devices[1].id], 1.0)
    assert [s.device_id for s in together.devices] == [devices[0].id, devices[2].id]


def test_through_the_host_gpucores_defaults_to_all_compute_units() -> None:
    host = amd_host(None)
    handle = host.vendor("amd")
    pod = PodView(ref=PodRef(name="p"))
    bare = handle.resource_request(
        pod=pod,
        container=ContainerView(name="c", limits={"amd.com/gpu": "1", "amd.com/gpumem": "8000"}),
    )
    assert bare is not None and bare.compute_percent == 100 and bare.memory_mib == 8000
    shared = handle.resource_request(
        pod=pod,
        container=ContainerView(
            name="c",
            limits={"amd.com/gpu": "1", "amd.com/gpumem": "8000", "amd.com/gpucores": "25"},
        ),
    )
    assert shared is not None and shared.compute_percent == 25
    devices = (gpu(0),)
    first = handle.fit(
        request=shared, node=NodeView(name="n", devices=devices), usage={}, device_order=[]
    )
    assert first.fits and first.devices[0].compute_percent == 25  # 76 of 304 CUs
    taken = {
        devices[0].id: used(
            devices[0].id, used_slots=1, used_memory_mib=8000, used_compute_percent=25
        )
    }
    second = handle.fit(
        request=bare, node=NodeView(name="n", devices=devices), usage=taken, device_order=[]
    )
    assert not second.fits and second.reasons[FitReason.INSUFFICIENT_COMPUTE] == 1
    assert handle.implements("xpushare_fit")
    host.close()


def test_a_use_gputype_of_separators_only_accepts_no_gpu_as_hami_does() -> None:
    # HAMi's AMD match (checkAMDType) refuses every card for `amd.com/use-gputype: ", "`: the
    # value is not blank, and no entry of it names a model. A blank value is no constraint,
    # and so is a `nouse-gputype` of separators.
    host = amd_host(None)
    handle = host.vendor("amd")
    view = NodeView(name="n", devices=(gpu(0), gpu(1)))
    container = ContainerView(name="c", limits={"amd.com/gpu": "1", "amd.com/gpumem": "8000"})

    def placed(**annotations: str) -> FitResult:
        pod = PodView(ref=PodRef(name="p"), containers=(container,), annotations=annotations)
        asked = handle.resource_request(pod=pod, container=container)
        assert asked is not None
        return handle.fit(request=asked, node=view, usage={}, device_order=[])

    refused = placed(**{"amd.com/use-gputype": ", "})
    assert not refused.fits
    assert refused.reasons[FitReason.MODEL_MISMATCH] == 2
    assert placed(**{"amd.com/use-gputype": " "}).fits
    assert placed(**{"amd.com/use-gputype": ", mi300x"}).fits
    assert not placed(**{"amd.com/use-gputype": "MI250"}).fits
    assert placed(**{"amd.com/nouse-gputype": ", "}).fits
    assert not placed(**{"amd.com/nouse-gputype": " ,MI300"}).fits
    host.close()

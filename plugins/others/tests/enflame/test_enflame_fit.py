"""Enflame's placement rules: DRS profile choice, slices, memory and compute; whole GCUs.

The rules are HAMi's (hami-protocol.md §8.2, ``pkg/device/enflame``); each case says which
one it pins. They run through the plugin host, with the real request parser reading a HAMi
pod spec, on GCUs laid out as the detection lays them out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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
from xpushare_others.enflame import plugin
from xpushare_others.enflame.config import EnflameConfig
from xpushare_others.enflame.profiles import settings_layout

GCU = "enflame.com/gcu"
DRS = "enflame.com/drs-gcu"
MEM = "enflame.com/gcu-memory"
CORE = "enflame.com/gcu-core"
ENV = "XPUSHARE_ENFLAME_DRS_REQUEST"


def _node(count: int = 2, healthy: tuple[bool, ...] = (), **config: Any) -> NodeView:
    drs = settings_layout(EnflameConfig(mode="drs", **config))
    slices, parts, ids, memory = drs.slices, drs.partitions, drs.ids, drs.memory_mib
    devices = tuple(
        Device(
            vendor="enflame-drs",
            id=f"node-a-enflame-drs-{i}",
            index=i,
            model="S60",
            memory_mib=memory,
            share_slots=slices,
            partitions=parts,
            healthy=healthy[i] if i < len(healthy) else True,
            extra={"minor": str(i), "drs-capacity": str(slices), **ids},
        )
        for i in range(count)
    )
    return NodeView(name="node-a", devices=devices)


@pytest.fixture
def hosts() -> Any:
    made: list[Any] = []

    def make(vendor: str = "enflame-drs") -> VendorHandle:
        obj = plugin.drs if vendor == "enflame-drs" else plugin.gcu
        made.append(vendor_host(vendor, obj, node_name=None))
        return made[-1].vendor(vendor)

    yield make
    for host in made:
        host.close()


def _request(
    handle: VendorHandle,
    annotations: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    **limits: str,
) -> Any:
    c = ContainerView(name="main", limits=limits, env=env or {})
    pod = PodView(ref=PodRef(name="p"), annotations=annotations or {}, containers=(c,))
    return handle.resource_request(pod=pod, container=c)


def _fit(
    handle: VendorHandle,
    request: Any,
    node: NodeView,
    usage: dict[str, DeviceUsage] | None = None,
    order: tuple[str, ...] = (),
) -> Any:
    return handle.fit(request=request, node=node, usage=usage or {}, device_order=order)


def _used(index: int, *profiles: str, slots: int = 0, memory: int = 0, compute: int = 0) -> Any:
    sizes = {"1g.6gb": (6144, 17), "3g.20gb": (20480, 50), "6g.40gb": (40960, 100)}
    mem = memory + sum(sizes[p][0] for p in profiles)
    cores = compute + sum(sizes[p][1] for p in profiles)
    device = f"node-a-enflame-drs-{index}"
    return {
        device: DeviceUsage(
            device_id=device,
            used_slots=slots + len(profiles),
            used_memory_mib=mem,
            used_compute_percent=cores,
            exclusive="6g.40gb" in profiles,
            partitions_in_use=profiles,
        )
    }


@pytest.mark.parametrize(
    ("limits", "profile"),
    [
        # drs-gcu: n asks for the profile of exactly n slices (TestFit_SelectProfileByRequest).
        ({DRS: "3"}, "3g.20gb"),
        ({DRS: "1"}, "1g.6gb"),
        ({DRS: "6"}, "6g.40gb"),
        # memory over twice the largest profile's GB is MiB (TestFit_SelectProfileByMemory...).
        ({MEM: "20480", CORE: "40"}, "3g.20gb"),
        ({MEM: "6144"}, "1g.6gb"),
        # up to twice the largest profile's GB it is GB.
        ({MEM: "6"}, "1g.6gb"),
        ({MEM: "7"}, "3g.20gb"),
        ({MEM: "40"}, "6g.40gb"),
        # 81 is over twice 40: 81 MiB, one GB.
        ({MEM: "81"}, "1g.6gb"),
        # a value with a unit is bytes.
        ({MEM: "8Gi"}, "3g.20gb"),
        # compute alone: the first profile with that share (ceil(slices * 100 / 6)).
        ({CORE: "17"}, "1g.6gb"),
        ({CORE: "18"}, "3g.20gb"),
        ({CORE: "51"}, "6g.40gb"),
        # drs-gcu wins over memory and compute, as in HAMi.
        ({DRS: "1", MEM: "20480"}, "1g.6gb"),
    ],
)
def test_a_drs_request_gets_the_profile_hami_picks(
    hosts: Callable[..., Any], limits: dict[str, str], profile: str
) -> None:
    handle = hosts()
    request = _request(handle, **limits)
    assert request.count == 1 and request.memory_mib == 0 and not request.exclusive
    result = _fit(handle, request, _node())
    assert result.fits, result.explain()
    (piece,) = result.devices
    assert piece.partition == profile
    sizes = {"1g.6gb": (6144, 17), "3g.20gb": (20480, 50), "6g.40gb": (40960, 100)}
    assert (piece.memory_mib, piece.compute_percent) == sizes[profile]
    assert piece.exclusive == (profile == "6g.40gb")


@pytest.mark.parametrize(
    "limits", [{DRS: "2"}, {MEM: "41"}, {MEM: "80"}, {MEM: "50000"}, {DRS: "12"}]
)
def test_no_matching_profile_does_not_fit(
    hosts: Callable[..., Any], limits: dict[str, str]
) -> None:
    # HAMi's ModeNotFit (TestFit_ProfileNotFound).
    handle = hosts()
    result = _fit(handle, _request(handle, **limits), _node())
    assert not result.fits and result.reasons == {FitReason.PARTITION_UNAVAILABLE: 2}
    assert "profiles: 1g.6gb, 3g.20gb, 6g.40gb" in result.explain()


def test_slices_held_are_counted_by_profile_and_hami_pods_by_memory(
    hosts: Callable[..., Any],
) -> None:
    handle = hosts()
    three = _request(handle, **{DRS: "3"})
    one = _request(handle, **{DRS: "1"})
    node = _node(count=1)
    assert _fit(handle, three, node, _used(0, "3g.20gb")).fits
    full = _used(0, "3g.20gb", "1g.6gb", "1g.6gb")  # 5 of 6 slices
    assert not _fit(handle, three, node, full).fits
    assert _fit(handle, three, node, full).reasons == {FitReason.SLOTS_EXHAUSTED: 1}
    # 50 + 17 + 17 + 17 % is over 100: the last slice is still free (HAMi's check loses it).
    assert _fit(handle, one, node, full).fits
    # A pod HAMi placed names no profile: its 20480 of 40960 MiB are 3 of 6 slices.
    hami = _used(0, slots=1, memory=20480, compute=50)
    assert _fit(handle, three, node, hami).fits
    both = _used(0, "1g.6gb", slots=1, memory=20480, compute=50)
    assert _fit(handle, three, node, both).reasons == {FitReason.SLOTS_EXHAUSTED: 1}


def test_memory_and_compute_are_checked_after_the_slices(hosts: Callable[..., Any]) -> None:
    handle = hosts()
    # Twelve slices, but the memory and cores of one GCU are those of its largest profile.
    node = _node(count=1, drs_capacity=12)
    one = _request(handle, **{DRS: "1"})
    two_threes = _used(0, "3g.20gb", "3g.20gb")
    assert _fit(handle, one, node, two_threes).reasons == {FitReason.INSUFFICIENT_MEMORY: 1}
    cores = _used(0, "1g.6gb", slots=0, compute=83)
    assert _fit(handle, one, node, cores).reasons == {FitReason.INSUFFICIENT_COMPUTE: 1}
    whole = _used(0, "6g.40gb")  # slices left, but the whole-GCU profile is exclusive
    assert _fit(handle, one, node, whole).reasons == {FitReason.HELD_EXCLUSIVELY: 1}


def test_mutex_uuid_health_and_the_policy_order(hosts: Callable[..., Any]) -> None:
    handle = hosts()
    node = _node(count=3, healthy=(False, True, True))
    # An unhealthy GCU is skipped (TestFit_UnhealthyDeviceRejected).
    result = _fit(handle, _request(handle, **{DRS: "1"}), node)
    assert result.devices[0].index == 1 and result.reasons == {FitReason.UNHEALTHY: 1}
    # The placement policy's order decides among the GCUs that fit.
    order = ("node-a-enflame-drs-2", "node-a-enflame-drs-1")
    assert _fit(handle, _request(handle, **{DRS: "1"}), node, order=order).devices[0].index == 2
    # mutex: only an idle GCU (TestFit_MutexRejectsUsedDevice).
    mutex = _request(handle, {"hami.io/gpu-scheduler-policy": "mutex"}, **{DRS: "1"})
    assert mutex.exclusive
    result = _fit(handle, mutex, node, _used(1, "1g.6gb"))
    assert result.devices[0].index == 2
    assert result.reasons == {FitReason.UNHEALTHY: 1, FitReason.EXCLUSIVE_CONFLICT: 1}
    # HAMi's UUID annotations.
    picked = _request(handle, {"enflame.com/nouse-gpuuuid": "node-a-enflame-drs-1"}, **{DRS: "1"})
    result = _fit(handle, picked, node)
    assert result.devices[0].index == 2 and result.reasons[FitReason.UUID_MISMATCH] == 1


def test_bad_drs_asks_are_refused_naming_the_resource(hosts: Callable[..., Any]) -> None:
    handle = hosts()
    with pytest.raises(ValueError, match=r"enflame.com/gcu-memory must be greater than 0"):
        _request(handle, **{MEM: "0", CORE: "20"})
    with pytest.raises(ValueError, match=r"enflame.com/gcu-core must be 1 to 100"):
        _request(handle, **{MEM: "6", CORE: "0"})
    with pytest.raises(ValueError, match=r"XPUSHARE_ENFLAME_DRS_REQUEST='drs:x' is not a DRS"):
        _request(handle, env={ENV: "drs:x"}, **{DRS: "1"})


def test_the_webhook_keeps_the_ask_and_asks_kubelet_for_one_share(
    hosts: Callable[..., Any],
) -> None:
    handle = hosts()
    c = ContainerView(name="main", limits={DRS: "3"}, requests={DRS: "3"}, env={"A": "b"})
    pod = PodView(ref=PodRef(name="p"), containers=(c,))
    request = handle.resource_request(pod=pod, container=c)
    patches = handle.mutate_admission(pod=pod, container=c, index=0, request=request)
    assert [(p.op, p.path, p.value) for p in patches] == [
        ("add", "/spec/containers/0/env/-", {"name": ENV, "value": "drs:slices=3"}),
        ("replace", "/spec/containers/0/resources/limits/enflame.com~1drs-gcu", "1"),
        ("replace", "/spec/containers/0/resources/requests/enflame.com~1drs-gcu", "1"),
    ]
    # What the scheduler reads after the patch is the same ask.
    after = ContainerView(name="main", limits={DRS: "1"}, env={"A": "b", ENV: "drs:slices=3"})
    again = handle.resource_request(pod=pod, container=after)
    assert again.partition == request.partition == "drs:slices=3"
    assert handle.mutate_admission(pod=pod, container=after, index=0, request=again) == ()
    spec = ContainerView(name="main", limits={MEM: "20480", CORE: "40"}, init=True)
    request = handle.resource_request(pod=pod, container=spec)
    patches = handle.mutate_admission(pod=pod, container=spec, index=1, request=request)
    assert [(p.op, p.path, p.value) for p in patches] == [
        ("add", "/spec/initContainers/1/env", [{"name": ENV, "value": "drs:raw=20480,core=40"}])
    ]


def test_bind_writes_hamis_drs_annotations(hosts: Callable[..., Any]) -> None:
    handle = hosts()
    piece = DeviceSlice(
        device_id="node-a-enflame-drs-1", index=1, memory_mib=20480, compute_percent=50,
        partition="3g.20gb",
    )  # fmt: skip
    assignment = PodAssignment(
        node="node-a",
        containers=(ContainerAssignment(container="main", vendor="enflame-drs", devices=(piece,)),),
    )
    pod = PodView(ref=PodRef(name="p"))
    written = handle.patch_annotations(pod=pod, assignment=assignment)
    assert written is not None
    assert {k: v for k, v in written.items() if k != "assigned-containers"} == {
        "enflame.com/gcu-assigned": "false",
        "enflame.com/gcu-assigned-index": "1",
        "enflame.com/gcu-assigned-id": "1",
        "enflame.com/gcu-assigned-minor": "1",
        "enflame.com/gcu-request-size": "3",
    }
    assert json.loads(written["assigned-containers"]) == {
        "main": {"allocated": False, "request": 3, "profileName": "3g.20gb", "profileID": "1"}
    }


def test_whole_gcus_are_idle_gcus_only(hosts: Callable[..., Any]) -> None:
    # HAMi's GCU: memory and cores 100, only GCUs nobody uses (Used == 0).
    handle = hosts("enflame")
    request = _request(handle, **{GCU: "2"})
    assert request.exclusive and request.compute_percent == 100 and request.memory_mib is None
    node = NodeView(
        name="node-a",
        devices=tuple(
            Device(vendor="enflame", id=f"node-a-GCU-{i}", index=i, model="S60",
                   memory_mib=49152, share_slots=1)
            for i in range(3)
        ),
    )  # fmt: skip
    busy = {"node-a-GCU-1": DeviceUsage(device_id="node-a-GCU-1", used_slots=1, exclusive=True)}
    result = _fit(handle, request, node, busy)
    assert result.fits and sorted(s.index for s in result.devices) == [0, 2]
    busy["node-a-GCU-2"] = DeviceUsage(device_id="node-a-GCU-2", used_slots=1, exclusive=True)
    assert not _fit(handle, request, node, busy).fits
    assert handle.score(request=request, node=node, fit=result, usage=busy) is None

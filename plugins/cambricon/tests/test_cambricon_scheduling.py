"""Cambricon requests in HAMi's units and defaults, and the sMLU fit (scheduler side)."""

from __future__ import annotations

import pytest
from cambricon_fakes import card_line

from xpushare.models import (
    ContainerView,
    DeviceUsage,
    FitReason,
    NodeView,
    PodRef,
    PodView,
)

MLU = "cambricon.com/vmlu"
MEM = "cambricon.com/mlu.smlu.vmemory"
CORE = "cambricon.com/mlu.smlu.vcore"


def pod(*containers: ContainerView, **annotations: str) -> PodView:
    return PodView(
        ref=PodRef(namespace="ml", name="p"), annotations=annotations, containers=containers
    )


def asks(**limits: str) -> ContainerView:
    return ContainerView(name="main", limits=limits)


@pytest.fixture
def handle(make_handle, table):
    table.cards()
    return make_handle()


def parse(handle, container: ContainerView, **annotations: str):
    return handle.resource_request(pod=pod(container, **annotations), container=container)


def test_vendor_spec_serves_hamis_names_and_memory_unit(handle):
    names = handle.spec.resource_names
    assert (names.count, names.memory, names.compute) == (MLU, MEM, CORE)
    assert handle.spec.memory_unit_mib == 256


def test_memory_is_counted_in_256_mib_units(handle):
    req = parse(handle, asks(**{MLU: "1", MEM: "16", CORE: "25"}))
    assert (req.memory_mib, req.compute_percent, req.exclusive) == (4096, 25, False)


def test_without_a_compute_share_a_pod_takes_whole_cards_as_under_hami(handle):
    req = parse(handle, asks(**{MLU: "2", MEM: "16"}))
    assert req.exclusive and req.compute_percent == 100 and req.count == 2
    assert req.memory_mib is None


def test_a_compute_share_alone_asks_for_one_card(handle):
    req = parse(handle, asks(**{CORE: "50"}))
    assert req.count == 1 and req.compute_percent == 50 and not req.exclusive
    assert req.memory_mib is None and req.memory_percent is None


def test_a_share_of_several_cards_is_refused(handle):
    with pytest.raises(ValueError, match="a share is part of one MLU"):
        parse(handle, asks(**{MLU: "2", MEM: "16", CORE: "50"}))


def test_an_smlu_needs_a_compute_quota(handle):
    with pytest.raises(ValueError, match="compute quota of 1 to 100"):
        parse(handle, asks(**{MLU: "1", MEM: "16", CORE: "0"}))


def test_hamis_model_and_uuid_annotations_are_read(handle):
    req = parse(
        handle,
        asks(**{MLU: "1"}),
        **{
            "cambricon.com/use-mlutype": "MLU370",
            "cambricon.com/nouse-mlutype": "MLU290",
            "cambricon.com/use-gpuuuid": "MLU-a,MLU-b",
        },
    )
    assert req.models_include == ("MLU370",) and req.models_exclude == ("MLU290",)
    assert req.uuids_include == ("MLU-a", "MLU-b")


def test_a_whole_card_only_cluster_refuses_shares(make_handle, table, cluster_config):
    table.cards()
    cluster_config(share_mode="none")
    handle = make_handle()
    with pytest.raises(ValueError, match="whole MLUs only"):
        parse(handle, asks(**{MLU: "1", CORE: "10"}))
    assert parse(handle, asks(**{MLU: "1"})).exclusive


def test_other_vendors_containers_are_not_ours(handle):
    assert parse(handle, asks(**{"nvidia.com/gpu": "1"})) is None


# --- fit -----------------------------------------------------------------------------------


@pytest.fixture
def node(make_handle, fake_lib, table):
    table.cards(card_line(0), card_line(1), card_line(2, name="MLU290", smlu=0))
    handle = make_handle(fake_lib)
    handle.startup()
    return handle, NodeView(name="n1", devices=handle.detect())


def fit(handle, view, req, usage=None, order=None):
    return handle.fit(
        request=req,
        node=view,
        usage=usage or {},
        device_order=order if order is not None else [d.id for d in view.devices],
    )


def test_a_share_is_rounded_to_whole_memory_units_on_the_first_card(node):
    handle, view = node
    req = parse(handle, asks(**{MLU: "1", "cambricon.com/mlu.smlu.vmemory": "3", CORE: "10"}))
    (piece,) = fit(handle, view, req, order=[view.devices[1].id]).devices
    assert piece.device_id == view.devices[1].id
    assert (piece.memory_mib, piece.compute_percent, piece.exclusive) == (768, 10, False)


def test_a_memory_percent_share_rounds_up_to_a_unit(node):
    handle, view = node
    percent = parse(handle, asks(**{MLU: "1", CORE: "10"})).model_copy(update={"memory_percent": 1})
    (piece,) = fit(handle, view, percent).devices
    # 1 % of 49152 MiB is 491 MiB, which takes two 256 MiB units.
    assert piece.memory_mib == 512


def test_smlu_quotas_are_never_overcommitted(node):
    handle, view = node
    a, b = view.devices[0].id, view.devices[1].id
    req = parse(handle, asks(**{MLU: "1", MEM: "64", CORE: "40"}))
    busy = {
        a: DeviceUsage(device_id=a, used_slots=2, used_memory_mib=8192, used_compute_percent=70),
        b: DeviceUsage(device_id=b, used_slots=1, used_memory_mib=40000, used_compute_percent=10),
    }
    result = handle.fit(
        request=req, node=view, usage=busy, device_order=[a, b], memory_overcommit=2.0
    )
    assert not result.fits
    assert result.reasons[FitReason.INSUFFICIENT_COMPUTE] == 1
    assert result.reasons[FitReason.INSUFFICIENT_MEMORY] == 1
    # The MLU290 cannot be cut into sMLUs at all.
    assert result.reasons[FitReason.SLOTS_EXHAUSTED] == 1


def test_share_slots_cap_the_shares_of_a_card(node):
    handle, view = node
    a = view.devices[0].id
    req = parse(handle, asks(**{MLU: "1", MEM: "1", CORE: "1"}))
    full = {
        a: DeviceUsage(device_id=a, used_slots=16, used_memory_mib=4096, used_compute_percent=16)
    }
    result = fit(handle, view, req, full, order=[a])
    assert result.devices[0].device_id == view.devices[1].id
    assert result.reasons[FitReason.SLOTS_EXHAUSTED] == 2


def test_whole_cards_need_idle_cards_and_the_model_filter(node):
    handle, view = node
    a = view.devices[0].id
    two = parse(handle, asks(**{MLU: "2"}), **{"cambricon.com/use-mlutype": "MLU370"})
    used = {a: DeviceUsage(device_id=a, used_slots=1, used_memory_mib=256, used_compute_percent=5)}
    result = fit(handle, view, two, used)
    assert not result.fits
    assert result.reasons[FitReason.EXCLUSIVE_CONFLICT] == 1
    assert result.reasons[FitReason.MODEL_MISMATCH] == 1
    one = fit(handle, view, parse(handle, asks(**{MLU: "1"})), used)
    (piece,) = one.devices
    assert piece.device_id == view.devices[1].id and piece.exclusive and piece.memory_mib == 49152


def test_numa_binding_keeps_cards_on_one_node(make_handle, fake_lib, table, tmp_path):
    for bus, numa in ((0x3B, 0), (0x3C, 1), (0x3D, 1)):
        path = tmp_path / "sys" / "bus" / "pci" / "devices" / f"0000:{bus:02x}:00.0"
        path.mkdir(parents=True)
        (path / "numa_node").write_text(f"{numa}\n")
    table.cards(card_line(0), card_line(1), card_line(2))
    handle = make_handle(fake_lib)
    handle.startup()
    view = NodeView(name="n", devices=handle.detect())
    req = parse(handle, asks(**{MLU: "2"}), **{"xpushare.io/numa-bind": "true"})
    result = fit(handle, view, req)
    assert sorted(s.index for s in result.devices) == [1, 2]


def test_numa_binding_restarts_at_each_numa_change_in_the_walk_as_hamis(
    make_handle, fake_lib, table, tmp_path
):
    # NUMA 0, 1, 0: the two cards of NUMA 0 are not one run in this walk (issue 36).
    for bus, numa in ((0x3B, 0), (0x3C, 1), (0x3D, 0)):
        path = tmp_path / "sys" / "bus" / "pci" / "devices" / f"0000:{bus:02x}:00.0"
        path.mkdir(parents=True)
        (path / "numa_node").write_text(f"{numa}\n")
    table.cards(card_line(0), card_line(1), card_line(2))
    handle = make_handle(fake_lib)
    handle.startup()
    view = NodeView(name="n", devices=handle.detect())
    req = parse(handle, asks(**{MLU: "2"}), **{"xpushare.io/numa-bind": "true"})
    split = fit(handle, view, req)
    assert not split.fits and split.reasons[FitReason.NUMA_MISMATCH] == 2
    ids = [d.id for d in view.devices]
    together = fit(handle, view, req, order=[ids[1], ids[0], ids[2]])
    assert sorted(s.index for s in together.devices) == [0, 2]


def test_a_share_without_compute_stays_off_a_card_whose_compute_is_booked(
    make_handle, fake_lib, table, cluster_config
):
    # The env split allows a 0 % compute share; like the core's fit, a card whose compute
    # is fully booked cannot take one (it would run on nothing; the placer had no score).
    table.cards(card_line(0), card_line(1))
    cluster_config(share_mode="env")
    handle = make_handle(fake_lib, share_mode="env")
    handle.startup()
    view = NodeView(name="n1", devices=handle.detect())
    a, b = (d.id for d in view.devices)
    assert {d.mode for d in view.devices} == {"env-split"}
    req = parse(handle, asks(**{MLU: "1", MEM: "4", CORE: "0"}))
    assert (req.compute_percent, req.exclusive) == (0, False)
    booked = {a: DeviceUsage(device_id=a, used_slots=1, used_compute_percent=100)}
    result = fit(handle, view, req, booked, order=[a, b])
    assert [s.device_id for s in result.devices] == [b]
    assert result.reasons[FitReason.COMPUTE_EXHAUSTED] == 1
    both = {**booked, b: DeviceUsage(device_id=b, used_slots=1, used_compute_percent=100)}
    refused = fit(handle, view, req, both, order=[a, b])
    assert not refused.fits
    assert refused.reasons[FitReason.COMPUTE_EXHAUSTED] == 2


def test_a_share_memory_with_a_unit_names_the_units_it_likely_meant(handle):
    # vmemory counts units of 256 MiB: "4Gi" was 4,294,967,296 of them.
    with pytest.raises(ValueError, match="counts units of 256 MiB") as refused:
        parse(handle, asks(**{MLU: "1", MEM: "4Gi", CORE: "10"}))
    assert f"is 16 units (4096 MiB): write {MEM}: 16" in str(refused.value)

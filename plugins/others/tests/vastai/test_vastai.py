"""The Vastai plugin against a fake VAML compiled from C, through the real plugin host."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.codec import decode_hami_node_devices
from xpushare.errors import VendorUnavailable
from xpushare.models import (
    AllocateRequest,
    ContainerView,
    Device,
    DeviceSlice,
    DeviceUsage,
    FitReason,
    NodeView,
    PodRef,
    PodView,
)
from xpushare.native import MissingSymbol
from xpushare.plugins import VendorHandle

GIB = 1024**3
SOURCE = Path(__file__).parent / "fake_vaml" / "fake_vaml.c"
VA = "vastaitech.com/va"


def card(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "dies": 2,
        "mem_total": 16 * GIB,
        "mem_used": 2 * GIB,
        "util": 2550,
        "bad_die": -1,
    }
    row.update(overrides)
    return row


@pytest.fixture
def table(table_for: Callable[[str], Any]) -> Any:
    t = table_for("FAKE_VAML_TABLE")
    t.write(card(), card(), version="1.0.7")
    return t


def started(vastai: Callable[..., VendorHandle], **config: Any) -> VendorHandle:
    handle = vastai(**config)
    handle.startup()
    return handle


# -- detection ---------------------------------------------------------------------------


def test_card_mode_reports_each_card_with_its_dies(table: Any, vastai: Any) -> None:
    first, second = started(vastai).detect()
    assert (first.id, second.id) == ("0", "1")
    assert first.model == "Vastai" and first.memory_mib == 32 * 1024
    assert first.share_slots == 1 and first.healthy  # HAMi's device plugin registers count 1
    assert first.extra == {
        "vaml_version": "1.0.7",
        "aic": "0",
        "strategy": "card",
        "nodes": "0,1",
    }
    assert second.extra["nodes"] == "2,3"


def test_die_mode_reports_each_die_numbered_across_cards(table: Any, vastai: Any) -> None:
    table.write(card(dies=4), card(dies=2))
    devices = started(vastai, device_strategy="die").detect()
    assert [d.id for d in devices] == ["0-0", "0-1", "0-2", "0-3", "1-0", "1-1"]
    assert [d.index for d in devices] == [0, 1, 2, 3, 4, 5]
    assert [d.extra["aic"] for d in devices] == ["0", "0", "0", "0", "1", "1"]
    assert devices[4].extra["nodes"] == "4" and devices[4].memory_mib == 16 * 1024
    assert {d.extra["strategy"] for d in devices} == {"die"}


def test_a_die_vaml_cannot_read_is_unhealthy_and_health_follows(table: Any, vastai: Any) -> None:
    table.write(card(bad_die=1), card())
    handle = started(vastai, device_strategy="die")
    devices = handle.detect()
    assert [d.healthy for d in devices] == [True, False, True, True]
    table.write(card(), card(bad_die=0))
    events = {e.device_id: e for e in handle.check_health(devices, 0.0) or ()}
    assert set(events) == {"0-1", "1-0"}
    assert events["0-1"].healthy and "again" in events["0-1"].reason
    assert not events["1-0"].healthy and "memory of die node(s) 2" in events["1-0"].reason


def test_a_die_gone_makes_its_card_unhealthy(table: Any, vastai: Any) -> None:
    handle = started(vastai)
    devices = handle.detect()
    table.write(card(), card(dies=1))
    (event,) = handle.check_health(devices, 0.0) or ()
    assert event.device_id == "1" and not event.healthy and "node(s) 3" in event.reason


def test_an_absurd_die_count_is_refused_before_looping(table: Any, vastai: Any) -> None:
    table.write(card(dies_reported=100_000))
    with pytest.raises(Exception, match="100000 dies on card 0"):
        started(vastai).detect()


def test_missing_library_makes_the_vendor_inactive_naming_every_path(
    table: Any, vastai: Any, tmp_path: Path
) -> None:
    with pytest.raises(VendorUnavailable) as caught:
        vastai(library_path=str(tmp_path / "none/libvaml.so")).startup()
    assert str(tmp_path / "none/libvaml.so") in caught.value.reason
    assert "/usr/lib/libvaml.so" in caught.value.reason
    assert "/usr/lib64/libvaml.so" in caught.value.reason


def test_init_failure_names_the_vaml_status(table: Any, vastai: Any) -> None:
    table.write(card(), init=3)
    with pytest.raises(VendorUnavailable, match=r"vamlInit returned 3 \(NO_PERMISSION\)"):
        vastai().startup()


def test_a_missing_required_symbol_is_a_clear_error(
    table: Any, vastai: Any, compile_fake: Callable[..., Path], tmp_path: Path
) -> None:
    old = compile_fake(SOURCE, tmp_path / "old", "libvaml.so", ["FAKE_OMIT_MEMORY"])
    with pytest.raises(MissingSymbol, match="vamlDeviceGetDieMemory"):
        vastai(library_path=str(old)).startup()


def test_monitor_sums_die_memory_and_averages_utilization(table: Any, vastai: Any) -> None:
    table.write(card(util=2500), card(util=5000, mem_used=GIB))
    handle = started(vastai)
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    first, second = snapshot.devices
    assert (first.memory_used_mib, first.memory_total_mib) == (4096, 32 * 1024)
    assert first.utilization_percent == 25.0 and second.utilization_percent == 50.0
    assert second.memory_used_mib == 2048


def test_monitor_without_the_utilization_call(
    table: Any, vastai: Any, compile_fake: Callable[..., Path], tmp_path: Path
) -> None:
    small = compile_fake(SOURCE, tmp_path / "small", "libvaml.so", ["FAKE_OMIT_UTILIZE"])
    handle = started(vastai, library_path=str(small))
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None and snapshot.devices[0].utilization_percent is None
    assert snapshot.devices[0].memory_used_mib == 4096


# -- allocate ----------------------------------------------------------------------------


def _alloc(devices: Any, *ids: str) -> AllocateRequest:
    by_id = {d.id: d for d in devices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="p", uid="u1"),
        container="main",
        node="node-a",
        resource_name=VA,
        slices=tuple(
            DeviceSlice(device_id=i, index=by_id[i].index, memory_mib=0, compute_percent=0)
            for i in ids
        ),
        devices=tuple(by_id[i] for i in ids),
    )


def test_allocate_a_card_gives_every_die_node(table: Any, vastai: Any) -> None:
    handle = started(vastai)
    devices = handle.detect()
    result = handle.allocate(_alloc(devices, "1"))
    assert result.envs == {"VASTAI_VISIBLE_DEVICES": "2,3"}
    assert [n.host_path for n in result.devices] == [
        "/dev/vacc2",
        "/dev/va2_ctl",
        "/dev/va_video2",
        "/dev/dri/renderD131",
        "/dev/vacc3",
        "/dev/va3_ctl",
        "/dev/va_video3",
        "/dev/dri/renderD132",
        "/dev/vatools",
        "/dev/va_sync",
    ]
    assert all(n.container_path == n.host_path for n in result.devices)


def test_allocate_dies_of_two_cards(table: Any, vastai: Any) -> None:
    handle = started(vastai, device_strategy="die")
    result = handle.allocate(_alloc(handle.detect(), "0-1", "1-0"))
    assert result.envs == {"VASTAI_VISIBLE_DEVICES": "1,2"}
    assert "/dev/vacc1" in [n.host_path for n in result.devices]
    assert "/dev/vacc0" not in [n.host_path for n in result.devices]


def test_a_die_node_missing_on_the_host_is_an_error_naming_it(table: Any, vastai: Any) -> None:
    table.write(*(card() for _ in range(5)))  # 10 dies; the host has nodes for 8
    handle = started(vastai, device_strategy="die")
    with pytest.raises(Exception, match=r"/dev/vacc9"):
        handle.allocate(_alloc(handle.detect(), "4-1"))


def test_without_device_nodes_only_the_runtime_variable(table: Any, vastai: Any) -> None:
    handle = started(vastai, device_nodes=False)
    result = handle.allocate(_alloc(handle.detect(), "0"))
    assert result.envs == {"VASTAI_VISIBLE_DEVICES": "0,1"} and result.devices == ()


# -- requests, fit and score ---------------------------------------------------------------


def _pod(annotations: dict[str, str] | None = None, **limits: str) -> tuple[PodView, Any]:
    c = ContainerView(name="main", limits=limits)
    return PodView(ref=PodRef(name="p"), annotations=annotations or {}, containers=(c,)), c


def test_a_request_books_slots_only(vastai: Any) -> None:
    handle = vastai()
    assert handle.spec.resource_names.all() == (VA,)
    pod, c = _pod(**{VA: "2"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    assert (request.count, request.memory_mib, request.compute_percent) == (2, 0, 0)
    assert not request.exclusive


def test_hami_mutex_policy_makes_the_request_exclusive(vastai: Any) -> None:
    handle = vastai()
    pod, c = _pod({"hami.io/gpu-scheduler-policy": "binpack, mutex"}, **{VA: "1"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None and request.exclusive
    pod, c = _pod({"hami.io/gpu-scheduler-policy": "mutexes"}, **{VA: "1"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None and not request.exclusive
    pod, c = _pod({"hami.io/gpu-scheduler-policy": "m" * 300}, **{VA: "1"})
    with pytest.raises(ValueError, match=r"hami\.io/gpu-scheduler-policy is 300 characters"):
        handle.resource_request(pod=pod, container=c)


def die(card_id: str, die_index: int, *, hami: bool = False) -> Device:
    extra = (
        {"hami.custominfo.AIC": card_id, "hami.custominfo.DeviceStrategy": "die"}
        if hami
        else {"aic": card_id, "strategy": "die", "nodes": str(die_index)}
    )
    return Device(
        vendor="vastai",
        id=f"{card_id}-{die_index}",
        index=die_index,
        model="Vastai",
        memory_mib=16384,
        share_slots=1,
        extra=extra,
    )


def _fit(handle: VendorHandle, devices: list[Device], request: Any, **used: int) -> Any:
    usage = {
        i.replace("_", "-"): DeviceUsage(device_id=i.replace("_", "-"), used_slots=n)
        for i, n in used.items()
    }
    node = NodeView(name="node-a", devices=tuple(devices))
    result = handle.fit(
        request=request, node=node, usage=usage, device_order=[d.id for d in devices]
    )
    return node, result


def _request(handle: VendorHandle, count: int, annotations: dict[str, str] | None = None) -> Any:
    pod, c = _pod(annotations, **{VA: str(count)})
    return handle.resource_request(pod=pod, container=c)


@pytest.mark.parametrize("hami", [False, True], ids=["ours", "hami-registration"])
def test_die_mode_prefers_the_card_with_most_free_dies(vastai: Any, hami: bool) -> None:
    handle = vastai()
    # Card 1 has one free die (first in the policy's order), card 2 three.
    devices = [die("1", 0, hami=hami), die("2", 1, hami=hami), die("2", 2, hami=hami)]
    devices += [die("2", 3, hami=hami), die("1", 4, hami=hami)]
    node, result = _fit(handle, devices, _request(handle, 3), **{"1_4": 1})
    assert result.fits
    assert [s.device_id for s in result.devices] == ["2-1", "2-2", "2-3"]
    assert all(s.memory_mib == 0 and s.compute_percent == 0 for s in result.devices)
    assert result.reasons == {FitReason.SLOTS_EXHAUSTED: 1}
    assert handle.score(request=_request(handle, 3), node=node, fit=result, usage={}) == 1.0


def test_die_mode_takes_across_cards_when_one_card_is_not_enough(vastai: Any) -> None:
    handle = vastai()
    devices = [die("1", 0), die("1", 1), die("2", 2), die("3", 3), die("3", 4)]
    node, result = _fit(handle, devices, _request(handle, 3))
    assert result.fits
    # Cards 1 and 3 have two dies each (1 first, as walked), then card 2.
    assert [s.device_id for s in result.devices] == ["1-0", "1-1", "3-3"]
    score = handle.score(request=_request(handle, 3), node=node, fit=result, usage={})
    assert score == pytest.approx(2 / 3)


def test_die_mode_one_die_takes_the_first_candidate(vastai: Any) -> None:
    handle = vastai()
    devices = [die("1", 0), die("2", 1), die("2", 2)]
    _, result = _fit(handle, devices, _request(handle, 1), **{"1_0": 1})
    assert [s.device_id for s in result.devices] == ["2-1"]


def test_mutex_refuses_idle_dies_of_a_busy_card(vastai: Any) -> None:
    handle = vastai()
    devices = [die("1", 0), die("1", 1), die("2", 2), die("2", 3)]
    mutex = _request(handle, 2, {"hami.io/gpu-scheduler-policy": "mutex"})
    _, result = _fit(handle, devices, mutex, **{"1_0": 1})
    assert result.fits and [s.device_id for s in result.devices] == ["2-2", "2-3"]
    assert result.reasons == {FitReason.SLOTS_EXHAUSTED: 1, FitReason.EXCLUSIVE_CONFLICT: 1}
    assert all(s.exclusive for s in result.devices)
    # Without mutex the idle sibling die is fine.
    _, shared = _fit(handle, devices, _request(handle, 1), **{"1_0": 1})
    assert [s.device_id for s in shared.devices] == ["1-1"]
    # Both cards busy: nothing fits, and the message says why.
    _, none = _fit(handle, devices, mutex, **{"1_0": 1, "2_3": 1})
    assert not none.fits
    assert none.reasons[FitReason.EXCLUSIVE_CONFLICT] == 2
    assert none.reasons[FitReason.NOT_ENOUGH_FIT] == 1


def test_die_mode_too_few_dies_on_the_node(vastai: Any) -> None:
    handle = vastai()
    _, result = _fit(handle, [die("1", 0)], _request(handle, 2))
    assert not result.fits and result.reasons[FitReason.TOO_FEW_DEVICES] == 1


def test_card_mode_counts_slots_with_the_core_fit(vastai: Any) -> None:
    handle = vastai()
    cards = [
        Device(vendor="vastai", id=str(i), index=i, model="Vastai", memory_mib=32768,
               share_slots=1, extra={"aic": str(i), "strategy": "card", "nodes": str(i)})
        for i in range(2)
    ]  # fmt: skip
    node, result = _fit(handle, cards, _request(handle, 1), **{"0": 1})
    assert result.fits and [s.device_id for s in result.devices] == ["1"]
    assert handle.score(request=_request(handle, 1), node=node, fit=result, usage={}) is None
    _, full = _fit(handle, cards, _request(handle, 1), **{"0": 1, "1": 1})
    assert not full.fits and full.reasons[FitReason.SLOTS_EXHAUSTED] == 2


def test_a_node_registered_by_hamis_device_plugin_fits_in_die_mode(vastai: Any) -> None:
    """Migration: HAMi's ``hami.io/node-va-register`` (with its die custominfo), as the core
    decodes it, is fitted with the die rules (HAMi's own vector shape: ids like ``7-0``)."""
    raw = json.dumps(
        [
            {"id": f"{c}-{d}", "index": i, "count": 1, "devmem": 32768, "type": "Vastai",
             "health": True, "custominfo": {"AIC": str(c), "DeviceStrategy": "die"}}
            for i, (c, d) in enumerate([(7, 0), (8, 0), (8, 1)])
        ]
    )  # fmt: skip
    devices = decode_hami_node_devices(raw, "vastai", key="hami.io/node-va-register")
    handle = vastai()
    node, result = _fit(handle, devices, _request(handle, 2))
    assert result.fits and [s.device_id for s in result.devices] == ["8-0", "8-1"]
    assert handle.score(request=_request(handle, 2), node=node, fit=result, usage={}) == 1.0


def test_the_vendor_fit_applies_to_die_mode_nodes_only(table: Any, vastai: Any) -> None:
    from xpushare.models import ContainerRequest, NodeView
    from xpushare_others.vastai import plugin

    cards = started(vastai).detect()
    assert plugin.vastai.xpushare_fit_applies(cards) is False
    # The promise behind False: on a whole-card node the plugin's fit leaves every request
    # to the core's.
    view = NodeView(name="n", devices=tuple(cards))
    for count in (1, 2):
        request = ContainerRequest(vendor="vastai", count=count)
        assert plugin.vastai.xpushare_fit(request, view, {}, []) is None
    table.write(card(dies=2))
    dies = started(vastai, device_strategy="die").detect()
    assert plugin.vastai.xpushare_fit_applies(dies) is True

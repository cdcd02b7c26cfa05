"""Health: XID events (critical and ignored), ECC, lost GPUs, and recovery."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import pytest
from fake_nvml import EVENT_DOUBLE_BIT_ECC, GPU_IS_LOST, NOT_SUPPORTED, UNKNOWN, FakeNvml, uuid

from xpushare.models import Device, HealthEvent
from xpushare.plugins import VendorHandle


def apply(devices: Sequence[Device], events: Sequence[HealthEvent] | None) -> list[Device]:
    """What the node agent does with the events: the devices' new health."""
    changes = {e.device_id: e.healthy for e in events or ()}
    return [d.model_copy(update={"healthy": changes.get(d.id, d.healthy)}) for d in devices]


def test_a_critical_xid_marks_only_its_gpu(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(3)
    handle = nvidia(recovery_quiet_s=3600)
    devices = handle.detect()
    assert handle.check_health(devices, 0) == ()
    fake.push_xid(1, 79)  # GPU has fallen off the bus
    (event,) = handle.check_health(devices, 0) or ()
    assert (event.device_id, event.healthy) == (uuid(1), False)
    assert "critical XID 79" in event.reason
    devices = apply(devices, [event])
    # Reported once; it stays unhealthy (no recovery within an hour of quiet).
    assert handle.check_health(devices, 0) == ()
    assert [d.healthy for d in handle.detect()] == [True, False, True]


def test_ignored_xids_only_log(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    fake.add_gpus(2)
    handle = nvidia()
    devices = handle.detect()
    caplog.set_level(logging.INFO, logger="xpushare_nvidia")
    for xid in (13, 31, 43):  # application errors, ignored by default as in HAMi
        fake.push_xid(0, xid)
    assert handle.check_health(devices, 0) == ()
    assert fake.pending_events == 0
    assert "XID 31 is an application error; ignored" in caplog.text


def test_the_ignored_set_is_configurable(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(1)
    handle = nvidia(ignored_xids=[79])
    devices = handle.detect()
    fake.push_xid(0, 79)
    assert handle.check_health(devices, 0) == ()
    fake.push_xid(0, 13)  # no longer in the set: critical now
    (event,) = handle.check_health(devices, 0) or ()
    assert not event.healthy and "XID 13" in event.reason


def test_double_bit_ecc_marks_the_gpu(nvidia: Callable[..., VendorHandle], fake: FakeNvml) -> None:
    fake.add_gpus(1)
    handle = nvidia()
    devices = handle.detect()
    fake.push_event(0, EVENT_DOUBLE_BIT_ECC)
    (event,) = handle.check_health(devices, 0) or ()
    assert not event.healthy and "ECC" in event.reason


def test_xid_on_a_mig_instance_names_it(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(1)
    fake.enable_mig(0)
    fake.add_mig(0, "1g.10gb", 9984, 14, 1, gi=7, ci=0)
    handle = nvidia()
    devices = handle.detect()
    fake.push_xid(0, 94, gi=7, ci=0)
    (event,) = handle.check_health(devices, 0) or ()
    assert "MIG GPU instance 7" in event.reason


def test_an_event_without_a_gpu_marks_every_gpu(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2)
    handle = nvidia()
    devices = handle.detect()
    fake.push_xid(-1, 62)
    events = handle.check_health(devices, 0) or ()
    assert {(e.device_id, e.healthy) for e in events} == {(uuid(0), False), (uuid(1), False)}
    assert all("did not name" in e.reason for e in events)


def test_recovery_once_the_gpu_behaves_again(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2)
    handle = nvidia(recovery_quiet_s=0)
    devices = handle.detect()
    fake.push_xid(0, 48)
    (bad,) = handle.check_health(devices, 0) or ()
    assert not bad.healthy
    devices = apply(devices, [bad])
    # No new critical event, and the GPU answers: healthy again on the next round.
    (good,) = handle.check_health(devices, 0) or ()
    assert (good.device_id, good.healthy) == (uuid(0), True)
    assert "answers NVML again" in good.reason
    assert [d.healthy for d in handle.detect()] == [True, True]


def test_a_lost_gpu_is_unhealthy_not_a_crash_and_recovers_when_back(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2)
    handle = nvidia(recovery_quiet_s=0)
    devices = handle.detect()
    fake.lose(1)
    (lost,) = handle.check_health(devices, 0) or ()
    assert (lost.device_id, lost.healthy) == (uuid(1), False)
    assert "GPU is lost" in lost.reason
    devices = apply(devices, [lost])
    # Still lost: no recovery however quiet it is.
    assert handle.check_health(devices, 0) == ()
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    sample = snapshot.devices[1]
    assert (sample.healthy, sample.memory_used_mib, sample.temperature_c) == (False, None, None)
    assert handle.detect()[1].healthy is False
    fake.lose(1, False)
    (back,) = handle.check_health(devices, 0) or ()
    assert (back.device_id, back.healthy) == (uuid(1), True)


def test_monitor_noticing_a_lost_gpu_feeds_the_health_check(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(1)
    handle = nvidia(recovery_quiet_s=3600)
    devices = handle.detect()
    fake.lose(0)
    snapshot = handle.monitor(devices)
    assert snapshot is not None and snapshot.devices[0].healthy is False
    fake.lose(0, False)  # back, but within the quiet period: still reported unhealthy
    (event,) = handle.check_health(devices, 0) or ()
    assert (event.healthy, "GPU is lost" in event.reason) == (False, True)


def test_gpus_that_cannot_report_events_are_still_probed(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    fake.add_gpus(2)
    fake.set(1, "supported_events", 0)
    handle = nvidia()
    devices = handle.detect()
    assert handle.check_health(devices, 0) == ()  # not unhealthy for lacking XID reports
    assert "cannot report XID events" in caplog.text
    fake.lose(1)
    (event,) = handle.check_health(devices, 0) or ()
    assert (event.device_id, event.healthy) == (uuid(1), False)


def test_no_event_set_leaves_probing(nvidia: Callable[..., VendorHandle], fake: FakeNvml) -> None:
    fake.add_gpus(1)
    fake.fail("nvmlEventSetCreate", NOT_SUPPORTED)
    handle = nvidia()
    devices = handle.detect()
    assert handle.check_health(devices, 0) == ()
    fake.lose(0)
    (event,) = handle.check_health(devices, 0) or ()
    assert not event.healthy


def test_a_failing_event_wait_is_logged_not_raised(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    fake.add_gpus(1)
    handle = nvidia()
    devices = handle.detect()
    fake.fail("nvmlEventSetWait_v2", UNKNOWN)
    assert handle.check_health(devices, 0) == ()
    assert "waiting for NVML events failed" in caplog.text
    fake.fail("nvmlEventSetWait_v2", GPU_IS_LOST)
    fake.lose(0)
    (event,) = handle.check_health(devices, 0) or ()
    assert not event.healthy


def test_health_checks_can_be_switched_off(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(1)
    handle = nvidia(health_checks=False)
    devices = handle.detect()
    fake.push_xid(0, 79)
    assert handle.check_health(devices, 0) is None


def test_the_wait_is_capped_so_allocate_is_not_held_up(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    # A check offered 60 s returns (capped at event_wait_max_s) with nothing to report; if the
    # cap did not work this test would hit pytest's timeout instead of passing.
    fake.add_gpus(1)
    handle = nvidia(event_wait_max_s=0.01)
    assert handle.check_health(handle.detect(), 60.0) == ()

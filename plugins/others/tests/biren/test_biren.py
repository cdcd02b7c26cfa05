"""The Biren plugin against a fake BRML compiled from C, through the real plugin host."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.codec import decode_hami_node_devices, decode_hami_pod_devices
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
SOURCE = Path(__file__).parent / "fake_brml" / "fake_brml.c"
GPU = "birentech.com/gpu"


def gpu(index: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "uuid": f"BR-{index}",
        "name": "BR104",
        "mem_total": 32 * GIB,
        "mem_used": GIB,
        "bus_id": f"00000000:{0x50 + index:02X}:00.0",
        "node_id": index,
        "health": 0,
        "util": 37,
        "temp": 48,
        "power_mw": 210_000,
        "svi": 0,
        "inst_mem": 16 * GIB,
    }
    row.update(overrides)
    return row


@pytest.fixture
def table(table_for: Callable[[str], Any]) -> Any:
    t = table_for("FAKE_BRML_TABLE")
    t.write(gpu(0), gpu(1), driver="1.6.2")
    return t


def started(biren: Callable[..., VendorHandle], **config: Any) -> VendorHandle:
    handle = biren(**config)
    handle.startup()
    return handle


def test_detect_names_each_gpu_as_its_card_node(table: Any, biren: Any, tmp_path: Path) -> None:
    numa = tmp_path / "sys/bus/pci/devices/0000:51:00.0"
    numa.mkdir(parents=True)
    (numa / "numa_node").write_text("1\n")
    first, second = started(biren).detect()
    assert (first.id, second.id) == ("card_0", "card_1")  # HAMi's Biren device ids
    assert first.model == "BR104" and first.memory_mib == 32 * 1024
    assert first.pci_bus_id == "0000:50:00.0" and second.numa_node == 1
    assert first.share_slots == 1 and first.healthy
    assert first.extra == {"uuid": "BR-0", "gpu": "0", "driver_version": "1.6.2"}


def test_a_split_gpu_is_one_device_per_svi_instance(table: Any, biren: Any) -> None:
    table.write(gpu(0, svi=2, node_id=0), gpu(1, node_id=2))
    devices = started(biren).detect()
    assert [d.id for d in devices] == ["card_0", "card_1", "card_2"]
    a, b, whole = devices
    assert (a.memory_mib, whole.memory_mib) == (16 * 1024, 32 * 1024)
    assert a.extra["uuid"] == "BR-0-instance-0" and b.extra["uuid"] == "BR-0-instance-1"
    assert (a.extra["instance"], b.extra["svi_mode"]) == ("0", "2")
    assert "instance" not in whole.extra


def test_svi_instances_can_be_ignored_and_old_brml_has_none(
    table: Any, biren: Any, compile_fake: Callable[..., Path], tmp_path: Path
) -> None:
    table.write(gpu(0, svi=4))
    assert [d.id for d in started(biren, svi_instances=False).detect()] == ["card_0"]
    old = compile_fake(SOURCE, tmp_path / "old", "libbiren-ml.so", ["FAKE_OMIT_SVI"])
    assert [d.id for d in started(biren, library_path=str(old)).detect()] == ["card_0"]


def test_missing_library_makes_the_vendor_inactive_naming_every_path(
    table: Any, biren: Any, tmp_path: Path
) -> None:
    with pytest.raises(VendorUnavailable) as caught:
        biren(library_path=str(tmp_path / "none/libbiren-ml.so")).startup()
    assert str(tmp_path / "none/libbiren-ml.so") in caught.value.reason
    assert "/usr/local/birensupa/driver/biren-smi/lib/libbiren-ml.so" in caught.value.reason


def test_init_failure_names_the_brml_code(table: Any, biren: Any) -> None:
    table.write(gpu(0), init=7)
    with pytest.raises(VendorUnavailable, match=r"brmlInit returned 7 \(DRIVER_NOT_LOADED\)"):
        biren().startup()


def test_a_missing_symbol_is_a_clear_error(
    table: Any, biren: Any, compile_fake: Callable[..., Path], tmp_path: Path
) -> None:
    old = compile_fake(SOURCE, tmp_path / "nohealth", "libbiren-ml.so", ["FAKE_OMIT_HEALTH"])
    with pytest.raises(MissingSymbol, match="brmlDeviceGetHealthStatus"):
        biren(library_path=str(old)).startup()


def test_health_follows_brml_status(table: Any, biren: Any) -> None:
    handle = started(biren)
    devices = handle.detect()
    table.write(gpu(0, health=1), gpu(1, health=2), driver="1.6.2")
    (event,) = handle.check_health(devices, 0.0) or ()  # WARNING stays healthy
    assert event.device_id == "card_1" and not event.healthy
    assert "CRITICAL_WARNING" in event.reason
    table.write(gpu(0, health=3), gpu(1), driver="1.6.2")
    assert started(biren).detect()[0].healthy is False


def test_monitor_readings(table: Any, biren: Any) -> None:
    handle = started(biren)
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    s = snapshot.devices[1]
    assert (s.memory_used_mib, s.utilization_percent, s.temperature_c, s.power_w) == (
        1024,
        37.0,
        48.0,
        210.0,
    )


def test_monitor_of_an_svi_instance_reads_its_own_memory(table: Any, biren: Any) -> None:
    table.write(gpu(0, svi=2, mem_used=3 * GIB))
    handle = started(biren)
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    assert [s.memory_total_mib for s in snapshot.devices] == [16 * 1024, 16 * 1024]
    assert snapshot.devices[1].memory_used_mib == 3 * 1024


def _alloc(devices: Any, *ids: str) -> AllocateRequest:
    by_id = {d.id: d for d in devices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="p", uid="u1"),
        container="main",
        node="node-a",
        resource_name=GPU,
        slices=tuple(
            DeviceSlice(device_id=i, index=by_id[i].index, memory_mib=0, compute_percent=0)
            for i in ids
        ),
        devices=tuple(by_id[i] for i in ids),
    )


def test_allocate_gives_card_nodes_and_names_them(table: Any, biren: Any) -> None:
    handle = started(biren)
    result = handle.allocate(_alloc(handle.detect(), "card_0", "card_1"))
    assert result.envs == {"BR_PHY_CARDS": "card_0,card_1"}
    assert [(n.host_path, n.container_path, n.permissions) for n in result.devices] == [
        ("/dev/biren/card_0", "/dev/biren/card_0", "rw"),
        ("/dev/biren/card_1", "/dev/biren/card_1", "rw"),
    ]
    with_dri = started(biren, dri_device=True).allocate(_alloc(handle.detect(), "card_1"))
    assert [n.host_path for n in with_dri.devices] == ["/dev/biren/card_1", "/dev/dri/renderD128"]


def test_a_card_node_missing_on_the_host_is_an_error_naming_it(table: Any, biren: Any) -> None:
    table.write(gpu(0, node_id=9))
    handle = started(biren)
    with pytest.raises(Exception, match=r"/dev/biren/card_9"):
        handle.allocate(_alloc(handle.detect(), "card_9"))


def _pod(annotations: dict[str, str] | None = None, **limits: str) -> tuple[PodView, Any]:
    c = ContainerView(name="main", limits=limits)
    return PodView(ref=PodRef(name="p"), annotations=annotations or {}, containers=(c,)), c


def test_requests_book_slots_only_and_mutex_is_exclusive(biren: Any) -> None:
    handle = biren()
    assert handle.spec.resource_names.all() == (GPU,)
    pod, c = _pod(**{GPU: "2"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    assert (request.count, request.memory_mib, request.compute_percent) == (2, 0, 0)
    pod, c = _pod({"hami.io/gpu-scheduler-policy": "mutex"}, **{GPU: "1"})
    mutex = handle.resource_request(pod=pod, container=c)
    assert mutex is not None and mutex.exclusive


def _gpus(slots: int) -> NodeView:
    devices = tuple(
        Device(vendor="biren", id=f"card_{i}", index=i, model="Biren", memory_mib=65024,
               share_slots=slots)
        for i in range(2)
    )  # fmt: skip
    return NodeView(name="node-a", devices=devices)


def test_fit_counts_slots_only(biren: Any) -> None:
    handle = biren()
    pod, c = _pod(**{GPU: "1"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    node = _gpus(2)
    order = ["card_0", "card_1"]
    # card_0 has all its memory and compute booked by others: a slot is all that counts.
    busy = {"card_0": DeviceUsage(device_id="card_0", used_slots=1, used_memory_mib=65024)}
    result = handle.fit(request=request, node=node, usage=busy, device_order=order)
    assert result.fits and [s.device_id for s in result.devices] == ["card_0"]
    full = {
        "card_0": DeviceUsage(device_id="card_0", used_slots=2),
        "card_1": DeviceUsage(device_id="card_1", used_slots=2),
    }
    refused = handle.fit(request=request, node=node, usage=full, device_order=order)
    assert not refused.fits and refused.reasons[FitReason.SLOTS_EXHAUSTED] == 2


def test_fit_under_mutex_takes_only_idle_gpus(biren: Any) -> None:
    handle = biren()
    pod, c = _pod({"hami.io/gpu-scheduler-policy": "spread,mutex"}, **{GPU: "1"})
    request = handle.resource_request(pod=pod, container=c)
    assert request is not None
    used = {"card_0": DeviceUsage(device_id="card_0", used_slots=1)}
    result = handle.fit(request=request, node=_gpus(4), usage=used, device_order=["card_0"])
    assert result.fits and [s.device_id for s in result.devices] == ["card_1"]
    assert result.reasons == {FitReason.EXCLUSIVE_CONFLICT: 1}


def test_hamis_biren_registration_and_allocation_name_the_same_devices(
    table: Any, biren: Any
) -> None:
    """Migration: HAMi's Biren device plugin registers ``card_<node id>`` ids; the devices
    detected here carry the same ids, so HAMi's allocated annotations count against them."""
    raw = json.dumps(
        [{"id": "card_0", "index": 0, "count": 1, "devmem": 32768, "type": "BR104",
          "health": True}]
    )  # fmt: skip
    registered = decode_hami_node_devices(raw, "biren", key="hami.io/node-biren-register")
    (allocated,) = decode_hami_pod_devices("card_0,Biren,0,0:;", "biren")
    detected = started(biren).detect()
    assert registered[0].id == detected[0].id == allocated[0].uuid == "card_0"

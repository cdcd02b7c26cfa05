"""The Enflame plugins against a fake EFML compiled from C, through the real plugin host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from enflame_fakes import S60_MIB, gcu

from xpushare.errors import VendorUnavailable
from xpushare.models import AllocateRequest, DeviceSlice, PodRef


def started(enflame: Any, vendor: str = "enflame", **config: Any) -> Any:
    handle = enflame(vendor, **config)
    handle.startup()
    return handle


def test_detect_names_gcus_as_hami_does(table: Any, enflame: Any) -> None:
    devices = started(enflame).detect()
    assert [d.id for d in devices] == [f"node-a-GCU-{i}" for i in range(4)]
    first, last = devices[0], devices[-1]
    assert first.model == "S60" and first.memory_mib == S60_MIB
    assert first.pci_bus_id == "0000:50:00.0" and first.numa_node == 0 and last.numa_node == 1
    assert first.share_slots == 1 and first.mode == "exclusive" and not first.partitions
    assert first.extra == {"minor": "0", "uuid": "T6R000000000"}


def test_drs_gcus_carry_their_profiles_and_slices(table: Any, enflame: Any) -> None:
    devices = started(enflame, "enflame-drs").detect()
    d = devices[2]
    assert d.id == "node-a-enflame-drs-2" and d.vendor == "enflame-drs" and d.mode == "drs"
    # HAMi: 6 slices (the largest profile), memory = the largest profile's 40 GB.
    assert d.share_slots == 6 and d.memory_mib == 40 * 1024
    assert [(p.name, p.memory_mib, p.compute_percent, p.max_count) for p in d.partitions] == [
        ("1g.6gb", 6144, 17, 6),
        ("3g.20gb", 20480, 50, 2),
        ("6g.40gb", 40960, 100, 1),
    ]
    assert d.extra["drs-profile-id/3g.20gb"] == "1" and d.extra["drs-capacity"] == "6"
    custom = started(
        enflame, "enflame-drs", id_format="uuid", drs_profiles={"2g.24gb": "7"}, drs_capacity=4
    ).detect()[0]
    assert custom.id == "T6R000000000" and custom.share_slots == 4
    assert [(p.name, p.compute_percent, p.max_count) for p in custom.partitions] == [
        ("2g.24gb", 100, 2)
    ]


def test_bad_profiles_are_refused_naming_the_field(table: Any, enflame: Any) -> None:
    with pytest.raises(Exception, match=r"drs_profiles.*'big' is not <slices>g.<memory>gb"):
        started(enflame, "enflame-drs", drs_profiles={"big": "0"})
    with pytest.raises(Exception, match=r"drs_capacity 4 is below the 6 slices"):
        started(enflame, "enflame-drs", drs_capacity=4)


def test_the_mode_decides_which_of_the_two_vendors_a_node_serves(table: Any, enflame: Any) -> None:
    with pytest.raises(VendorUnavailable, match=r"mode is 'gcu' here.*set mode: drs") as caught:
        enflame("enflame-drs", mode="gcu").startup()
    assert caught.value.vendor == "enflame-drs"
    with pytest.raises(VendorUnavailable, match=r"mode is 'drs' here.*set mode: gcu"):
        enflame("enflame", mode="drs").startup()


def test_missing_library_and_failed_init_make_the_vendor_inactive(
    table: Any, enflame: Any, tmp_path: Path
) -> None:
    with pytest.raises(VendorUnavailable) as caught:
        enflame(library_path=str(tmp_path / "x/libefml.so")).startup()
    assert "/usr/lib/libefml.so" in caught.value.reason
    table.write(gcu(0), init=6)
    with pytest.raises(VendorUnavailable, match=r"EfmlInit returned 6 \(EFML_ERROR_DRIVER_NOT"):
        enflame().startup()


def test_health_follows_efml_and_a_gcu_it_cannot_query_is_unhealthy(
    table: Any, enflame: Any
) -> None:
    table.write(gcu(0), gcu(1, healthy=0))
    handle = started(enflame)
    devices = handle.detect()
    assert [d.healthy for d in devices] == [True, False]
    table.write(gcu(0, healthy=0), gcu(1))
    events = {e.device_id: e for e in handle.check_health(devices, 0.0) or ()}
    assert not events["node-a-GCU-0"].healthy and "unhealthy" in events["node-a-GCU-0"].reason
    assert events["node-a-GCU-1"].healthy
    table.write(gcu(0, health_rc=254), gcu(1))
    lost = {e.device_id: e for e in handle.check_health(devices, 0.0) or ()}["node-a-GCU-0"]
    assert not lost.healthy and "EFML_ERROR_FAIL" in lost.reason


def test_monitor_reads_efml_units(table: Any, enflame: Any) -> None:
    table.write(gcu(0), gcu(1, usage=-1, temp=-1, power=-1))
    handle = started(enflame)
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    a, b = snapshot.devices
    assert (a.utilization_percent, a.memory_used_mib, a.memory_total_mib) == (40.0, 1024, S60_MIB)
    assert (a.temperature_c, a.power_w) == (52.0, 120.0)
    assert (b.utilization_percent, b.temperature_c, b.power_w) == (None, None, None)


def _alloc(devices: Any, resource: str, *slices: DeviceSlice) -> AllocateRequest:
    by_id = {d.id: d for d in devices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="p", uid="u1"),
        container="main",
        node="node-a",
        resource_name=resource,
        slices=slices,
        devices=tuple(by_id[s.device_id] for s in slices),
    )


def test_allocate_gives_the_gcu_nodes_and_visible_devices(table: Any, enflame: Any) -> None:
    handle = started(enflame)
    devices = handle.detect()
    pieces = [
        DeviceSlice(device_id=devices[i].id, index=i, memory_mib=S60_MIB, compute_percent=100)
        for i in (1, 3)
    ]
    result = handle.allocate(_alloc(devices, "enflame.com/gcu", *pieces))
    assert [n.host_path for n in result.devices] == ["/dev/gcuctl", "/dev/gcu1", "/dev/gcu3"]
    assert result.envs == {
        "ENFLAME_VISIBLE_DEVICES": "1,3",
        "XPUSHARE_ENFLAME_DEVICES": "node-a-GCU-1,node-a-GCU-3",
    }
    root = Path(handle.context.config["host_root"])
    (root / "dev/gcuctl").unlink()  # the control node is passed only where the host has it
    assert [n.host_path for n in handle.allocate(_alloc(devices, "x", pieces[0])).devices] == [
        "/dev/gcu1"
    ]
    (root / "dev/gcu3").unlink()
    with pytest.raises(Exception, match=r"node-a-GCU-3 \(index 3\) has no device node /dev/gcu3"):
        handle.allocate(_alloc(devices, "enflame.com/gcu", *pieces))


def test_allocate_names_the_drs_profile(table: Any, enflame: Any) -> None:
    handle = started(enflame, "enflame-drs")
    devices = handle.detect()
    piece = DeviceSlice(
        device_id=devices[2].id, index=2, memory_mib=20480, compute_percent=50, partition="3g.20gb"
    )
    result = handle.allocate(_alloc(devices, "enflame.com/drs-gcu", piece))
    assert [n.host_path for n in result.devices] == ["/dev/gcuctl", "/dev/gcu2"]
    assert result.envs["ENFLAME_VISIBLE_DEVICES"] == "2"
    assert result.envs["XPUSHARE_ENFLAME_DRS_PROFILE"] == "3g.20gb"
    assert result.envs["XPUSHARE_ENFLAME_DRS_PROFILE_ID"] == "1"
    # A slice naming no profile gets the smallest that holds its memory.
    bare = piece.model_copy(update={"partition": None, "memory_mib": 7000})
    named = handle.allocate(_alloc(devices, "enflame.com/drs-gcu", bare)).envs
    assert named["XPUSHARE_ENFLAME_DRS_PROFILE"] == "3g.20gb"
    huge = piece.model_copy(update={"partition": None, "memory_mib": 50000})
    with pytest.raises(Exception, match=r"names no DRS profile and no profile holds its 50000"):
        handle.allocate(_alloc(devices, "enflame.com/drs-gcu", huge))

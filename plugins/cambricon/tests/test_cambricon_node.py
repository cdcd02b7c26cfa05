"""Health, monitoring and Allocate of the Cambricon vendor, through the host on the fake CNDev."""

from __future__ import annotations

import pytest
from cambricon_fakes import card_line

from xpushare.errors import PluginError
from xpushare.models import (
    AllocatedContainer,
    AllocateRequest,
    DeviceSlice,
    PodRef,
    ReleaseRequest,
)


@pytest.fixture
def started(make_handle, fake_lib, table):
    table.cards(card_line(0), card_line(1))
    handle = make_handle(fake_lib)
    handle.startup()
    return handle, table


def test_health_changes_are_reported_and_recoveries_too(started):
    handle, table = started
    devices = handle.detect()
    assert handle.check_health(devices, 0.0) == ()
    table.cards(card_line(0, health=0), card_line(1))
    (event,) = handle.check_health(devices, 0.0)
    assert event.device_id == devices[0].id and not event.healthy
    assert "health state is 0" in event.reason
    sick = handle.detect()
    assert [d.healthy for d in sick] == [False, True]
    table.cards(card_line(0), card_line(1))
    (recovered,) = handle.check_health(sick, 0.0)
    assert recovered.healthy


def test_monitor_reports_load_memory_temperature_and_power(started):
    handle, _ = started
    devices = handle.detect()
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    first, second = snapshot.devices
    assert (first.utilization_percent, second.utilization_percent) == (10.0, 20.0)
    assert (first.memory_used_mib, first.memory_total_mib) == (1000, 49152)
    assert (first.temperature_c, second.temperature_c) == (40.0, 41.0)
    assert (first.power_w, second.power_w) == (70.0, 71.0)
    assert first.healthy and second.healthy


def test_monitor_marks_unoffered_readings_absent(started):
    handle, table = started
    devices = handle.detect()
    table.cards(card_line(0), card_line(1), extra=("fail cndevGetPowerInfo 10",))
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    assert [s.power_w for s in snapshot.devices] == [None, None]
    assert snapshot.devices[0].temperature_c == 40.0


def test_monitor_reports_a_card_that_stopped_answering_as_unhealthy(started):
    handle, table = started
    devices = handle.detect()
    table.cards(card_line(0), card_line(1), extra=("fail cndevGetMemoryUsage 7",))
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    assert [s.healthy for s in snapshot.devices] == [False, False]


def _request(devices, *slices: DeviceSlice, container: str = "main") -> AllocateRequest:
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="infer-0", uid="uid-1"),
        container=container,
        node="node-a",
        resource_name="cambricon.com/vmlu",
        slices=slices,
        devices=tuple(devices),
    )


def _whole(device) -> DeviceSlice:
    return DeviceSlice(
        device_id=device.id,
        index=device.index,
        memory_mib=device.memory_mib,
        compute_percent=100,
        exclusive=True,
    )


def _share(device, memory_mib: int = 4096, percent: int = 25) -> DeviceSlice:
    return DeviceSlice(
        device_id=device.id, index=device.index, memory_mib=memory_mib, compute_percent=percent
    )


def _host_dev(tmp_path, *names: str):
    root = tmp_path / "host"
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / "dev" / name).write_text("")
    return root


def test_allocate_whole_cards_gives_their_nodes_and_visible_devices(
    make_handle, fake_lib, table, tmp_path
):
    host = _host_dev(
        tmp_path, "cambricon_ctl", "cambricon_ipcm0", "cambricon_ipcm1", "commu1", "cambr-msgq:1"
    )
    (host / "usr/bin").mkdir(parents=True)
    (host / "usr/bin/cnmon").write_text("")
    table.cards(card_line(0), card_line(1))
    handle = make_handle(fake_lib, host_root=str(host), cnmon_path="/usr/bin/cnmon")
    handle.startup()
    devices = handle.detect()
    out = handle.allocate(_request(devices, _whole(devices[1]), _whole(devices[0])))
    assert out.envs == {"CAMBRICON_VISIBLE_DEVICES": "0,1"}
    assert [d.host_path for d in out.devices] == [
        "/dev/cambricon_dev0",
        "/dev/cambricon_ipcm0",
        "/dev/cambricon_dev1",
        "/dev/cambricon_ipcm1",
        "/dev/commu1",
        "/dev/cambr-msgq:1",
        "/dev/cambricon_ctl",
    ]
    assert all(d.container_path == d.host_path and d.permissions == "rw" for d in out.devices)
    assert [(m.host_path, m.container_path, m.read_only) for m in out.mounts] == [
        ("/usr/bin/cnmon", "/usr/bin/cnmon", True)
    ]


def test_allocate_a_share_creates_an_smlu_instance_with_the_shares_quota(
    make_handle, fake_lib, table, tmp_path
):
    host = _host_dev(tmp_path, "cambricon_ctl", "cambricon_ipcm1")
    table.cards(card_line(0), card_line(1))
    handle = make_handle(fake_lib, host_root=str(host))
    handle.startup()
    devices = handle.detect()

    out = handle.allocate(_request(devices, _share(devices[1], memory_mib=4096, percent=25)))

    assert [d.host_path for d in out.devices] == [
        "/dev/cambricon_dev1",
        "/dev/cambricon_ipcm1",
        "/dev/cambricon-caps/cap_dev1_mi1",
        "/dev/cambricon_ctl",
    ]
    assert out.envs == {
        "VIRTUAL_DEVICES": (
            "/dev/cambricon_dev1,/dev/cambricon_ipcm1,/dev/cambricon-caps/cap_dev1_mi1"
        )
    }
    assert out.annotations == {"cambricon.xpushare.io/smlu-instance": "SMLU-0101-0000"}
    # The profile carries the share: 25 % of the MLU and 4096 MiB, in bytes.
    assert table.lines("profile") == [f"profile card=1 id=0 quota=25 mem={4096 << 20}"]
    (instance,) = table.lines("instance")
    assert instance.startswith("instance card=1 id=1 profile=0 name=xps-")
    assert instance.endswith("-main")


def test_a_retried_allocate_reuses_the_instance_and_profiles_are_shared(started):
    handle, table = started
    devices = handle.detect()
    first = handle.allocate(_request(devices, _share(devices[0])))
    again = handle.allocate(_request(devices, _share(devices[0])))
    assert again.devices == first.devices
    assert len(table.lines("instance")) == 1
    # Another container with the same share: a new instance of the same profile.
    other = handle.allocate(_request(devices, _share(devices[0]), container="sidecar"))
    assert other.devices[-1].host_path == "/dev/cambricon-caps/cap_dev0_mi2"
    assert len(table.lines("profile")) == 1
    assert len(table.lines("instance")) == 2


def test_env_mode_hands_the_card_with_hamis_split_variables(make_handle, fake_lib, table, tmp_path):
    host = _host_dev(tmp_path, "cambricon_ctl", "cambricon-split")
    (host / "opt").mkdir()
    (host / "opt/smlu-containerd").write_text("")
    table.cards(card_line(0))
    handle = make_handle(
        fake_lib,
        host_root=str(host),
        share_mode="env",
        split_runtime_path="/opt/smlu-containerd",
    )
    handle.startup()
    devices = handle.detect()
    out = handle.allocate(_request(devices, _share(devices[0], memory_mib=768, percent=30)))
    assert out.envs == {
        "CAMBRICON_SPLIT_ENABLE": "1",
        "CAMBRICON_SPLIT_VISIBLE_DEVICES": "0",
        "CAMBRICON_SPLIT_MEMS": "1",
    }
    assert [d.host_path for d in out.devices] == [
        "/dev/cambricon_dev0",
        "/dev/cambricon_ctl",
        "/dev/cambricon-split",
    ]
    assert [(m.host_path, m.container_path) for m in out.mounts] == [
        ("/opt/smlu-containerd", "/usr/bin/smlu-containerd")
    ]
    assert table.lines("instance") == []


def test_allocate_refuses_a_share_of_a_card_that_cannot_be_cut(make_handle, fake_lib, table):
    table.cards(card_line(0, smlu=0))
    handle = make_handle(fake_lib)
    handle.startup()
    devices = handle.detect()
    with pytest.raises(PluginError) as info:
        handle.allocate(_request(devices, _share(devices[0])))
    message = str(info.value)
    assert "ml/infer-0" in message and devices[0].id in message
    assert "sMLU supported: false" in message


def test_a_failed_smlu_creation_is_an_error_naming_the_call(started):
    handle, table = started
    devices = handle.detect()
    table.cards(card_line(0), card_line(1), extra=("fail cndevCreateSMluInstanceByProfileId 9",))
    with pytest.raises(PluginError) as info:
        handle.allocate(_request(devices, _share(devices[0])))
    assert "cndevCreateSMluInstanceByProfileId" in str(info.value)
    assert "CNDEV_ERROR_INSUFFICIENT_SPACE" in str(info.value)


def test_allocate_refuses_a_card_missing_from_the_inventory(started):
    handle, _ = started
    devices = handle.detect()
    ghost = DeviceSlice(device_id="MLU-gone", memory_mib=1, compute_percent=100, exclusive=True)
    with pytest.raises(PluginError, match="MLU-gone"):
        handle.allocate(_request(devices, ghost))


def _release(request: AllocateRequest, record: dict[str, str] | None) -> ReleaseRequest:
    return ReleaseRequest(
        pod=request.pod,
        node=request.node,
        containers=(
            AllocatedContainer(container=request.container, slices=request.slices, record=record),
        ),
    )


@pytest.mark.parametrize("by_name", [True, False])
def test_release_destroys_the_containers_smlu_instance_once(
    make_handle, fake_builds, table, by_name
):
    table.cards(card_line(0), card_line(1))
    handle = make_handle(fake_builds.get() if by_name else fake_builds.get("NO_DESTROY_BY_NAME"))
    handle.startup()
    devices = handle.detect()
    mine = _request(devices, _share(devices[1]))
    other = _request(devices, _share(devices[1]), container="sidecar")
    out = handle.allocate(mine)
    handle.allocate(other)
    assert out.record["smlu_instance"].startswith("xps-") and "mi_handle" in out.record
    assert len(table.lines("instance")) == 2
    handle.release(_release(mine, out.record))
    (left,) = table.lines("instance")
    assert left.endswith("-sidecar")  # the other container's instance is untouched
    handle.release(_release(mine, out.record))  # again: nothing left to free, no error
    assert len(table.lines("instance")) == 1


def test_release_without_a_record_finds_the_instance_by_name(make_handle, fake_lib, table):
    table.cards(card_line(0), card_line(1))
    handle = make_handle(fake_lib)
    handle.startup()
    devices = handle.detect()
    mine = _request(devices, _share(devices[0]))
    handle.allocate(mine)
    handle.release(_release(mine, None))  # the agent stopped before keeping the record
    assert table.lines("instance") == []

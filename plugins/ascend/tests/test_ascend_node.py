"""Health, monitoring and Allocate of the Ascend vendor, through the host on the fake DCMI."""

from __future__ import annotations

import pytest
from ascend_fakes import chip_line

from xpushare.errors import PluginError
from xpushare.models import AllocateRequest, DeviceSlice, PodRef


@pytest.fixture
def started(make_handle, fake_lib, table):
    table.chips(chip_line(0), chip_line(1))
    handle = make_handle(fake_lib)
    handle.startup()
    return handle, table


def test_health_changes_are_reported_and_recoveries_too(started):
    handle, table = started
    devices = handle.detect()
    assert handle.check_health(devices, 0.0) == ()

    table.chips(chip_line(0), chip_line(1, health=3))
    (event,) = handle.check_health(devices, 0.0)
    assert event.device_id == devices[1].id
    assert not event.healthy
    assert "health code 3 (critical alarm)" in event.reason

    sick = handle.detect()
    assert [d.healthy for d in sick] == [True, False]
    table.chips(chip_line(0), chip_line(1))
    (recovered,) = handle.check_health(sick, 0.0)
    assert recovered.healthy and recovered.device_id == devices[1].id


def test_minor_alarm_is_healthy_but_uncorrectable_ecc_is_not(started):
    handle, table = started
    table.chips(chip_line(0, health=1), chip_line(1, sbe=7, dbe=2))
    first, second = handle.detect()
    assert first.healthy
    assert not second.healthy
    (event,) = handle.check_health([first, second.model_copy(update={"healthy": True})], 0.0)
    assert "2 uncorrectable HBM ECC error(s)" in event.reason


def test_single_bit_ecc_errors_alone_keep_a_chip_healthy(started):
    handle, table = started
    table.chips(chip_line(0, sbe=40))
    (device,) = handle.detect()
    assert device.healthy


def test_monitor_reports_load_memory_temperature_and_power(started):
    handle, _ = started
    devices = handle.detect()
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    first, second = snapshot.devices
    assert first.device_id == devices[0].id
    assert first.utilization_percent == 10.0 and second.utilization_percent == 20.0
    assert (first.memory_used_mib, first.memory_total_mib) == (1000, 65536)
    assert first.temperature_c == 40.0 and second.temperature_c == 41.0
    # DCMI reports power in 0.1 W.
    assert first.power_w == 95.0 and second.power_w == 95.1
    assert first.healthy and second.healthy


def test_monitor_marks_unreadable_readings_absent_not_zero(started):
    handle, table = started
    table.chips(
        chip_line(0),
        chip_line(1),
        extra=("fail dcmi_get_device_temperature -8255", "fail dcmi_get_device_power_info -8255"),
    )
    snapshot = handle.monitor(handle.detect())
    assert snapshot is not None
    assert all(s.temperature_c is None and s.power_w is None for s in snapshot.devices)
    assert snapshot.devices[0].utilization_percent == 10.0


def test_monitor_reports_a_chip_that_stopped_answering_as_unhealthy(started):
    handle, table = started
    devices = handle.detect()
    table.chips(chip_line(0), chip_line(1), extra=("fail dcmi_get_device_health -8010",))
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    assert [s.healthy for s in snapshot.devices] == [False, False]
    assert snapshot.devices[0].memory_used_mib is None


def _request(devices, *slices: DeviceSlice) -> AllocateRequest:
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="train-0", uid="u-1"),
        container="main",
        node="node-a",
        resource_name="huawei.com/Ascend910B3",
        slices=slices,
        devices=tuple(devices),
    )


def _whole(device) -> DeviceSlice:
    return DeviceSlice(
        device_id=device.id,
        index=device.index,
        memory_mib=65536,
        compute_percent=100,
        exclusive=True,
    )


def test_allocate_whole_npus_gives_nodes_visible_devices_and_driver_mounts(
    make_handle, fake_lib, table, tmp_path
):
    host = tmp_path / "host"
    (host / "usr/local/Ascend/driver/lib64").mkdir(parents=True)
    (host / "usr/local/dcmi").mkdir(parents=True)
    (host / "usr/local/bin").mkdir(parents=True)
    (host / "usr/local/bin/npu-smi").write_text("")
    table.chips(chip_line(0, phy=4), chip_line(1, phy=5))
    handle = make_handle(fake_lib, host_root=str(host))
    handle.startup()
    devices = handle.detect()

    out = handle.allocate(_request(devices, _whole(devices[1]), _whole(devices[0])))

    assert out.envs == {"ASCEND_VISIBLE_DEVICES": "4,5"}
    assert [(d.host_path, d.container_path, d.permissions) for d in out.devices] == [
        ("/dev/davinci4", "/dev/davinci4", "rw"),
        ("/dev/davinci5", "/dev/davinci5", "rw"),
        ("/dev/davinci_manager", "/dev/davinci_manager", "rw"),
        ("/dev/devmm_svm", "/dev/devmm_svm", "rw"),
        ("/dev/hisi_hdc", "/dev/hisi_hdc", "rw"),
    ]
    # Only the host paths that exist: add-ons and ascend_install.info are absent here.
    assert [(m.host_path, m.container_path, m.read_only) for m in out.mounts] == [
        ("/usr/local/Ascend/driver", "/usr/local/Ascend/driver", True),
        ("/usr/local/dcmi", "/usr/local/dcmi", True),
        ("/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi", True),
    ]


def test_allocate_a_vnpu_leaves_the_cut_to_ascend_docker_runtime(started):
    handle, _ = started
    devices = handle.detect()
    piece = DeviceSlice(
        device_id=devices[1].id,
        index=1,
        memory_mib=16384,
        compute_percent=25,
        partition="vir05_1c_16g",
    )
    out = handle.allocate(_request(devices, piece))
    assert out.envs == {"ASCEND_VISIBLE_DEVICES": "1", "ASCEND_VNPU_SPECS": "vir05_1c_16g"}
    # Never the physical chip's node: that would give the container the whole chip.
    assert out.devices == () and out.mounts == ()


def test_allocate_refuses_a_template_the_chip_does_not_offer(started):
    handle, _ = started
    devices = handle.detect()
    piece = DeviceSlice(
        device_id=devices[0].id, index=0, memory_mib=3072, compute_percent=13, partition="vir01"
    )
    with pytest.raises(PluginError) as info:
        handle.allocate(_request(devices, piece))
    message = str(info.value)
    assert "ml/train-0" in message and devices[0].id in message
    assert "vir05_1c_16g, vir10_3c_32g" in message


def test_allocate_refuses_a_device_missing_from_the_inventory(started):
    handle, _ = started
    devices = handle.detect()
    ghost = DeviceSlice(device_id="NPU-gone", memory_mib=1, compute_percent=100, exclusive=True)
    with pytest.raises(PluginError) as info:
        handle.allocate(_request(devices, ghost))
    assert "NPU-gone" in str(info.value) and "delete the pod" in str(info.value)

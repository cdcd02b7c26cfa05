"""The Neuron plugin on a fake host's sysfs tree, through the real plugin host."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from xpushare.errors import VendorUnavailable
from xpushare.models import AllocateRequest, DeviceSlice, PodRef
from xpushare.plugins import PluginHost

DEVICES = "sys/devices/virtual/neuron_device"


def started(neuron: Any, *args: Any, **kwargs: Any) -> Any:
    handle = neuron(*args, **kwargs)
    handle.startup()
    return handle


def _root(handle: Any) -> Path:
    return Path(handle.context.config["host_root"])


def test_detect_reads_the_drivers_sysfs_and_names_devices_as_hami(neuron: Any) -> None:
    devices = started(neuron, 4, host={"cores": 2}).detect()
    assert [d.id for d in devices] == [f"node-a-AWSNeuron-{i}" for i in range(4)]
    d = devices[0]
    assert d.model == "Trainium" and d.compute_units == 2 and d.share_slots == 2
    assert d.memory_mib == 0 and d.mode == "cores" and d.healthy
    assert d.extra == {"cores": "2", "instance_type": "trn1.32xlarge", "connected": "1,3"}
    eight = started(neuron, 2, host={"cores": 8, "instance_type": "trn2.48xlarge"}).detect()
    assert [d.share_slots for d in eight] == [8, 8]


def test_no_driver_makes_the_vendor_inactive_naming_the_directory(
    neuron: Any, tmp_path: Path
) -> None:
    with pytest.raises(VendorUnavailable, match=r"cannot be read.*aws-neuronx-dkms") as caught:
        neuron(sysfs_root=str(tmp_path / "nothing")).startup()
    assert caught.value.vendor == "awsneuron"
    assert f"{tmp_path}/nothing/devices/virtual/neuron_device" in caught.value.reason
    empty = tmp_path / "empty" / "devices/virtual/neuron_device"
    empty.mkdir(parents=True)
    with pytest.raises(VendorUnavailable, match=r"lists no neuron<N> device"):
        neuron(sysfs_root=str(tmp_path / "empty")).startup()


def test_each_absence_is_one_80_column_detect_line_with_what_to_do(
    neuron: Any, tmp_path: Path
) -> None:
    """`xpushare detect`'s line: the cause and the next step, not the path cut at 80."""
    from xpushare.cli.detect_cmd import _lines

    empty = tmp_path / "empty" / "devices/virtual/neuron_device"
    empty.mkdir(parents=True)
    reasons = []
    for root in (tmp_path / "a-long-mount-point-for-the-hosts-sys-tree", tmp_path / "empty"):
        with pytest.raises(VendorUnavailable) as caught:
            neuron(sysfs_root=str(root)).startup()
        reasons.append(caught.value.reason)
    # Beside the longest vendor name installed (the column is as wide as it).
    longest = max(PluginHost.from_environment().vendors, key=len)
    rows = [{"vendor": longest, "state": "active", "devices": 1}]
    rows += [{"vendor": "awsneuron", "state": "inactive", "reason": r} for r in reasons]
    lines = _lines(rows, 80)
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[2].endswith("no Neuron driver: load aws-neuronx-dkms or set sysfs_root")
    assert lines[3].endswith("no Neuron device: use an Inferentia or Trainium instance")


def test_a_device_the_driver_drops_or_without_its_node_is_unhealthy(neuron: Any) -> None:
    handle = started(neuron, 3)
    devices = handle.detect()
    root = _root(handle)
    (root / DEVICES / "neuron1/core_count").unlink()
    (root / "dev/neuron2").unlink()
    events = {e.device_id: e for e in handle.check_health(devices, 0.0) or ()}
    assert set(events) == {"node-a-AWSNeuron-1", "node-a-AWSNeuron-2"}
    assert "no longer publishes neuron1" in events["node-a-AWSNeuron-1"].reason
    assert "/dev/neuron2 is missing" in events["node-a-AWSNeuron-2"].reason
    again = handle.detect()
    assert [d.healthy for d in again] == [True, False, False]
    assert again[1].extra == {"state": "core_count unreadable"}
    (root / "dev/neuron2").touch()
    back = {e.device_id: e for e in handle.check_health(again, 0.0) or ()}
    assert back["node-a-AWSNeuron-2"].healthy and "node-a-AWSNeuron-1" not in back


def test_monitor_sums_the_cores_device_memory(neuron: Any) -> None:
    handle = started(neuron, 2, host={"cores": 2, "used_bytes": 5 * 2**20})
    devices = handle.detect()
    shutil.rmtree(_root(handle) / DEVICES / "neuron1/neuron_core0")
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    a, b = snapshot.devices
    assert (a.memory_used_mib, a.utilization_percent, a.healthy) == (10, None, True)
    assert b.memory_used_mib == 5


def _alloc(devices: Any, *slices: DeviceSlice) -> AllocateRequest:
    by_id = {d.id: d for d in devices}
    return AllocateRequest(
        pod=PodRef(namespace="ml", name="p", uid="u1"),
        container="main",
        node="node-a",
        resource_name="aws.amazon.com/neuron",
        slices=slices,
        devices=tuple(by_id[s.device_id] for s in slices),
    )


def test_allocate_names_the_cores_by_their_node_wide_ids(neuron: Any) -> None:
    handle = started(neuron, 4, host={"cores": 2})
    devices = handle.detect()
    whole = [
        DeviceSlice(device_id=devices[i].id, index=i, memory_mib=0, compute_percent=100)
        for i in (2, 3)
    ]
    result = handle.allocate(_alloc(devices, *whole))
    assert [n.host_path for n in result.devices] == ["/dev/neuron2", "/dev/neuron3"]
    assert result.envs == {
        "NEURON_RT_VISIBLE_CORES": "4,5,6,7",
        "AWS_NEURON_VISIBLE_DEVICES": "2,3",
        "XPUSHARE_AWSNEURON_DEVICES": "node-a-AWSNeuron-2,node-a-AWSNeuron-3",
    }
    second_core = DeviceSlice(
        device_id=devices[1].id, index=1, memory_mib=0, compute_percent=50, partition="cores:2"
    )
    result = handle.allocate(_alloc(devices, second_core))
    assert result.envs["NEURON_RT_VISIBLE_CORES"] == "3"
    assert [n.host_path for n in result.devices] == ["/dev/neuron1"]
    (_root(handle) / "dev/neuron1").unlink()
    with pytest.raises(Exception, match=r"AWSNeuron-1 \(index 1\) has no device node /dev/neuron1"):
        handle.allocate(_alloc(devices, second_core))

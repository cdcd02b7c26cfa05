"""Detection: identity, memory, placement, MIG state and topology, through the real host."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fake_nvml import (
    GPU_IS_LOST,
    NOT_SUPPORTED,
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_SINGLE,
    UNKNOWN,
    FakeNvml,
    Gpu,
    mig_uuid,
    uuid,
)

from xpushare.models import LinkKind, PartitionProfile, TopologyLink
from xpushare.plugins import VendorHandle


def links_of(device: object) -> set[tuple[str, LinkKind, int]]:
    return {(link.peer, link.kind, link.count) for link in device.links}  # type: ignore[attr-defined]


def test_identity_memory_and_placement(nvidia: Callable[..., VendorHandle], fake: FakeNvml) -> None:
    fake.add_gpus(
        1,
        Gpu(
            name="NVIDIA H100 80GB HBM3", memory_mib=81559, sm_count=132, capability=(9, 0), numa=1
        ),
    )
    fake.add_gpus(1, Gpu(name="NVIDIA H100 80GB HBM3", numa=1))
    handle = nvidia(share_slots=4)
    first, second = handle.detect()
    assert first.vendor == "nvidia"
    assert (first.id, first.index, first.model) == (uuid(0), 0, "NVIDIA H100 80GB HBM3")
    assert first.memory_mib == 81559
    assert first.compute_units == 132
    assert first.numa_node == 1
    assert first.pci_bus_id == "0000:10:00.0"  # NVML's 8-digit domain, normalized
    assert first.share_slots == 4
    assert first.mode == "shared"
    assert first.healthy
    assert first.extra["compute_capability"] == "9.0"
    assert first.extra["minor_number"] == "0"
    assert second.index == 1 and second.pci_bus_id == "0000:11:00.0"


def test_numa_falls_back_to_sysfs(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, tmp_path: Path
) -> None:
    fake.add_gpus(3, numa=[-1, -1, -1])  # NVML: not supported
    sysfs = tmp_path / "sys"
    for i, value in ((0, "1\n"), (1, "-1\n")):  # GPU 2 has no sysfs entry at all
        entry = sysfs / f"bus/pci/devices/0000:{0x10 + i:02x}:00.0"
        entry.mkdir(parents=True)
        (entry / "numa_node").write_text(value)
    devices = nvidia(sysfs_root=str(sysfs)).detect()
    assert [d.numa_node for d in devices] == [1, None, None]


def test_optional_facts_are_absent_not_invented(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(1)
    fake.fail("nvmlDeviceGetAttributes_v2", NOT_SUPPORTED)
    fake.fail("nvmlDeviceGetCudaComputeCapability", UNKNOWN)
    (device,) = nvidia().detect()
    assert device.compute_units == 0
    assert "compute_capability" not in device.extra


def test_gpu_without_memory_info_is_left_out_unless_configured(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2)
    fake.fail("nvmlDeviceGetMemoryInfo", NOT_SUPPORTED, gpu=1)
    plain = nvidia()
    assert [d.id for d in plain.detect()] == [uuid(0)]
    plain.shutdown()  # one NVML user per process, as on a node
    configured = nvidia(preconfigured_memory_mib=120_000).detect()
    assert [d.memory_mib for d in configured] == [81920, 120_000]


def test_gpu_whose_uuid_cannot_be_read_is_left_out(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(3)
    fake.fail("nvmlDeviceGetUUID", UNKNOWN, gpu=1)
    assert [(d.id, d.index) for d in nvidia().detect()] == [(uuid(0), 0), (uuid(2), 2)]


def test_a_lost_gpu_stays_in_the_inventory_unhealthy(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2)
    handle = nvidia()
    assert all(d.healthy for d in handle.detect())
    fake.lose(1)
    devices = handle.detect()
    assert [(d.id, d.healthy) for d in devices] == [(uuid(0), True), (uuid(1), False)]
    fake.lose(1, False)
    # Detection alone does not declare it healthy: the health check decides that.
    assert [d.healthy for d in handle.detect()] == [True, False]


def test_a_gpu_lost_before_it_was_ever_seen_is_not_invented(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2)
    fake.lose(0)
    assert [d.id for d in nvidia().detect()] == [uuid(1)]


def test_enumeration_failure_is_a_detection_error_not_an_empty_node(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(1)
    handle = nvidia()
    fake.fail("nvmlDeviceGetCount_v2", UNKNOWN)
    with pytest.raises(Exception, match="Unknown Error"):
        handle.detect()


def test_mig_mode_and_instances(nvidia: Callable[..., VendorHandle], fake: FakeNvml) -> None:
    fake.add_gpus(2, Gpu(name="NVIDIA A100-SXM4-40GB", memory_mib=40960, sm_count=98))
    fake.set(1, "mig_supported", 1)  # capable, but off
    fake.enable_mig(0)
    fake.add_mig(0, "3g.20gb", 19968, 42, 3, gi=1)
    fake.add_mig(0, "2g.10gb", 9856, 28, 2, gi=5)
    fake.add_mig(0, "1g.5gb", 4864, 14, 1, gi=13)
    fake.add_mig(0, "1g.5gb", 4864, 14, 1, gi=14)
    split, whole = nvidia().detect()
    assert split.mode == "mig"
    assert split.extra["mig_mode"] == "enabled"
    assert split.share_slots == 4
    assert split.partitions == (
        PartitionProfile(name="1g.5gb", memory_mib=4864, compute_percent=15, max_count=2),
        PartitionProfile(name="2g.10gb", memory_mib=9856, compute_percent=29, max_count=1),
        PartitionProfile(name="3g.20gb", memory_mib=19968, compute_percent=43, max_count=1),
    )
    assert mig_uuid(0, 13) in split.extra["mig_instances"]
    assert whole.mode == "shared"
    assert whole.extra["mig_mode"] == "disabled"
    assert whole.partitions == ()


def test_pending_mig_change_is_reported(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(1)
    fake.enable_mig(0, pending=0)  # disabling was asked; takes effect after a GPU reset
    (device,) = nvidia().detect()
    assert device.mode == "mig"
    assert device.extra["mig_mode_pending"] == "disabled"
    assert device.partitions == ()


def test_nvlink_and_pcie_topology(nvidia: Callable[..., VendorHandle], fake: FakeNvml) -> None:
    # Two NVLink pairs (0-1 with 4 links, 2-3 with 2) on one host bridge, pairs across a
    # single PCIe switch, GPU 0 and 2 on the same board.
    fake.add_gpus(4)
    fake.nvlink(0, 1, 4)
    fake.nvlink(2, 3, 2)
    fake.topology(0, 1, TOPOLOGY_SINGLE)
    fake.topology(2, 3, TOPOLOGY_SINGLE)
    fake.topology(0, 2, TOPOLOGY_INTERNAL)
    for a, b in ((0, 3), (1, 2), (1, 3)):
        fake.topology(a, b, TOPOLOGY_HOSTBRIDGE)
    devices = nvidia().detect()
    assert links_of(devices[0]) == {
        (uuid(1), LinkKind.NVLINK, 4),
        (uuid(1), LinkKind.PCIE_SWITCH, 1),
        (uuid(2), LinkKind.SAME_BOARD, 1),
        (uuid(3), LinkKind.PCIE_HOST_BRIDGE, 1),
    }
    assert (uuid(2), LinkKind.NVLINK, 2) in links_of(devices[3])
    assert not any(k is LinkKind.NVLINK for p, k, _ in links_of(devices[0]) if p == uuid(2))


def test_nvswitch_links_connect_every_pair(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(3)
    fake.nvswitch(0, 12)
    fake.nvswitch(1, 12)
    fake.nvswitch(2, 6)
    devices = nvidia().detect()
    assert TopologyLink(peer=uuid(1), kind=LinkKind.NVLINK, count=12) in devices[0].links
    assert TopologyLink(peer=uuid(2), kind=LinkKind.NVLINK, count=6) in devices[0].links


def test_asymmetric_nvlinks_count_what_both_ends_agree_on(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    fake.add_gpus(2)
    fake.nvlink(0, 1, 2)
    fake.lib.fake_set_link(0, 2, b"00000000:11:00.0")  # one more, seen from GPU 0 only
    devices = nvidia().detect()
    assert (uuid(1), LinkKind.NVLINK, 2) in links_of(devices[0])
    assert "report 3 and 2 NVLinks" in caplog.text


def test_gpus_without_nvlink_have_only_pcie_links(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2, numa=[0, 1])
    devices = nvidia().detect()
    assert links_of(devices[0]) == {(uuid(1), LinkKind.CROSS_NUMA, 1)}


def test_topology_of_a_gpu_lost_meanwhile_does_not_break_detection(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(2)
    fake.nvlink(0, 1, 2)
    fake.fail("nvmlDeviceGetNvLinkState", GPU_IS_LOST, gpu=1)
    devices = nvidia().detect()
    assert [d.id for d in devices] == [uuid(0), uuid(1)]
    assert all(d.links == () for d in devices)

"""Detection through the real amdsmi wrapper on fake libraries: what each GPU becomes."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from amd_fakes import GIB, NOT_SUPPORTED, FakeGpu, cpx_partitions, mi300x

from xpushare.errors import PluginError
from xpushare.models import LinkKind
from xpushare.plugins import VendorHandle

Start = Callable[..., VendorHandle]


def test_an_eight_gpu_mi300x_node(started: Start) -> None:
    devices = started([mi300x(i) for i in range(8)]).detect()
    assert [d.id for d in devices] == [f"GPU-4d3a0f9e12ab55{i:02x}" for i in range(8)]
    first, last = devices[0], devices[7]
    assert first.model == "AMD Instinct MI300X"
    assert first.memory_mib == 192 * 1024
    assert first.compute_units == 304
    assert (first.numa_node, last.numa_node) == (0, 1)
    assert last.pci_bus_id == "0000:7c:00.0"
    assert first.mode == "shared" and first.healthy and first.share_slots == 10
    assert {link.peer for link in first.links} == {d.id for d in devices[1:]}
    assert {link.kind for link in first.links} == {LinkKind.XGMI}
    assert last.extra["render_minor"] == "135" and last.extra["card_minor"] == "7"
    assert last.extra["kfd_node"] == "9"
    assert first.extra["uuid"] == "e0ff74a1-0000-1000-8000-4d3a0f9e1200"
    assert first.extra["compute_partition"] == "SPX"
    assert first.extra["memory_partition"] == "NPS1"
    assert first.extra["gfx_target"] == "gfx942"
    assert first.extra["xgmi_hive"] == "0xa1b2c3d4"


def test_cpx_partitions_are_devices_of_their_own(started: Start) -> None:
    devices = started([mi300x(0), *cpx_partitions(1)]).detect()
    whole, parts = devices[0], devices[1:]
    assert whole.id == "GPU-4d3a0f9e12ab5500"
    assert [p.id for p in parts] == [f"GPU-4d3a0f9e12ab5501-cpx{n}" for n in range(8)]
    assert all(p.mode == "cpx" and p.memory_mib == 24 * 1024 for p in parts)
    assert all(p.compute_units == 38 for p in parts)
    assert parts[3].extra["render_minor"] == str(128 + 8 + 3)
    assert parts[3].extra["partition_id"] == "3"
    assert parts[3].extra["memory_partition"] == "NPS4"
    siblings = {link.peer: link.kind for link in parts[0].links}
    assert siblings[parts[1].id] is LinkKind.SAME_BOARD
    assert siblings[whole.id] is LinkKind.XGMI


def test_a_consumer_gpu_without_unique_id_partitions_xgmi_or_ecc(started: Start) -> None:
    gpu = FakeGpu(
        serial=0,
        uuid="5f0f744c-0000-1000-8000-000000000001",
        market_name="AMD Radeon RX 7900 XTX",
        compute_units=96,
        gfx_target=0x1100,
        vram_total=24 * GIB,
        compute_partition=None,
        memory_partition=None,
    )
    (device,) = started([gpu], failures=[("amdsmi_get_gpu_ecc_count", -1, NOT_SUPPORTED)]).detect()
    assert device.id == "5f0f744c-0000-1000-8000-000000000001"
    assert device.mode == "shared" and device.healthy and device.links == ()
    assert device.memory_mib == 24 * 1024 and device.compute_units == 96
    assert "compute_partition" not in device.extra and "xgmi_hive" not in device.extra


def test_uncorrectable_memory_errors_make_a_gpu_unhealthy(started: Start) -> None:
    devices = started([mi300x(0), mi300x(1, ecc_uncorrectable=3, ecc_correctable=9)]).detect()
    assert [d.healthy for d in devices] == [True, False]


def test_no_gpus_is_an_empty_inventory_not_an_error(started: Start) -> None:
    assert started([]).detect() == ()


def test_a_failed_enumeration_is_an_error_not_an_empty_node(started: Start) -> None:
    handle = started([mi300x(0)], failures=[("amdsmi_get_processor_handles", -1, 12)])
    with pytest.raises(PluginError, match=r"amdsmi could not list the GPUs.*AMDSMI_STATUS_IO"):
        handle.detect()


def test_a_gpu_whose_vram_cannot_be_read_is_left_out_with_a_warning(
    started: Start, caplog: pytest.LogCaptureFixture
) -> None:
    unreadable = [
        ("amdsmi_get_gpu_memory_total", 1, NOT_SUPPORTED),
        ("amdsmi_get_gpu_vram_usage", 1, NOT_SUPPORTED),
    ]
    handle = started([mi300x(0), mi300x(1), mi300x(2)], failures=unreadable)
    with caplog.at_level(logging.WARNING):
        devices = handle.detect()
    assert [d.index for d in devices] == [0, 2]
    assert "GPU 1 (0000:1c:00.0) left out: its VRAM size cannot be read" in caplog.text


def test_vram_falls_back_to_the_usage_call(started: Start) -> None:
    handle = started([mi300x(0)], failures=[("amdsmi_get_gpu_memory_total", -1, NOT_SUPPORTED)])
    assert handle.detect()[0].memory_mib == 192 * 1024

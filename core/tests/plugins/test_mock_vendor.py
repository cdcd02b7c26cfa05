"""The mock vendor: devices only when asked, the whole contract, health from its file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from xpushare import VendorUnavailable
from xpushare.models import AllocateRequest, DeviceSlice, PodRef
from xpushare.plugins import HostSettings, PluginHost, VendorHandle
from xpushare.plugins.builtin import CORE_PLUGINS, mock


@pytest.fixture
def handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[VendorHandle]:
    monkeypatch.delenv(mock.SPEC_ENV, raising=False)
    spec = tmp_path / "devices.json"
    spec.write_text('{"devices": [{"model": "A100", "memory_mib": 40960, "count": 2}]}')
    host = PluginHost(
        HostSettings(),
        core_plugins=CORE_PLUGINS,
        node_name="n7",
        vendor_config={"mock": {"devices": str(spec)}},
    )
    host.register("mock", mock)
    yield host.vendor("mock")
    host.close()


def test_no_spec_means_inactive_never_fake_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(mock.SPEC_ENV, raising=False)
    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("mock", mock)
    try:
        with pytest.raises(VendorUnavailable, match="XPUSHARE_MOCK_DEVICES"):
            host.vendor("mock").startup()
    finally:
        host.close()


def test_spec_string_forms() -> None:
    devices = mock.parse_spec("2x H100-80GB, T4-16GB", "n1")
    assert [(d.id, d.model, d.memory_mib) for d in devices] == [
        ("MOCK-n1-0", "H100-80GB", 81920),
        ("MOCK-n1-1", "H100-80GB", 81920),
        ("MOCK-n1-2", "T4-16GB", 16384),
    ]
    with pytest.raises(ValueError, match="is not like '8x A100-80GB'"):
        mock.parse_spec("8x -80GB")


def test_detect_monitor_allocate(handle: VendorHandle) -> None:
    handle.startup()
    devices = handle.detect()
    assert [d.id for d in devices] == ["MOCK-n7-0", "MOCK-n7-1"]
    snapshot = handle.monitor(devices)
    assert snapshot is not None
    assert [s.memory_used_mib for s in snapshot.devices] == [10240, 10240]
    request = AllocateRequest(
        pod=PodRef(name="p"),
        container="main",
        node="n7",
        resource_name="xpushare.io/mock-gpu",
        slices=(DeviceSlice(device_id="MOCK-n7-1", index=1, memory_mib=2000, compute_percent=30),),
        devices=(devices[1],),
    )
    allocation = handle.allocate(request)
    assert allocation.envs == {
        "XPUSHARE_MOCK_VISIBLE_DEVICES": "MOCK-n7-1",
        "XPUSHARE_MOCK_MEMORY_LIMIT_0": "2000m",
        "XPUSHARE_MOCK_CORE_LIMIT_0": "30",
    }


def test_health_follows_the_file(handle: VendorHandle, tmp_path: Path) -> None:
    handle.startup()
    devices = handle.detect()
    assert handle.check_health(devices, 0.0) == ()
    (tmp_path / "devices.json").write_text(
        '{"devices": [{"model": "A100", "memory_mib": 40960, "count": 1},'
        ' {"model": "A100", "memory_mib": 40960, "healthy": false}]}'
    )
    events = handle.check_health(devices, 0.0)
    assert events is not None
    assert [(e.device_id, e.healthy) for e in events] == [("MOCK-n7-1", False)]


def test_bad_file_is_inactive_with_the_reason(handle: VendorHandle, tmp_path: Path) -> None:
    (tmp_path / "devices.json").write_text(
        '{"devices": [{"model": "A", "memory_mib": 1, "colour": "red"}]}'
    )
    with pytest.raises(VendorUnavailable, match="allowed keys"):
        handle.startup()

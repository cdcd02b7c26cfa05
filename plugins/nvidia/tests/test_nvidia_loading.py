"""Loading NVML: configured driver roots and paths, and why the vendor is inactive when not."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_nvml import DRIVER_NOT_LOADED, SONAME, FakeNvml

from xpushare import VendorUnavailable
from xpushare.plugins import HostSettings, PluginHost, VendorHandle
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare_nvidia import plugin
from xpushare_nvidia.config import NvidiaConfig
from xpushare_nvidia.library import candidates


def test_the_entry_point_names_this_plugin() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="xpushare.vendors") if e.name == "nvidia"]
    assert ep.value == "xpushare_nvidia.plugin"
    assert ep.load() is plugin


def test_resource_names_default_to_hamis_and_can_be_renamed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = plugin.xpushare_vendor()
    assert spec.resource_names.all() == (
        "nvidia.com/gpu",
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
    )
    monkeypatch.setenv("XPUSHARE_NVIDIA_RESOURCE_COUNT", "example.com/vgpu")
    assert plugin.xpushare_vendor().resource_names.count == "example.com/vgpu"


def test_a_driver_root_is_searched_in_its_library_dirs(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.add_gpus(1)
    handle = nvidia()
    (device,) = handle.detect()
    assert device.extra["driver_version"] == "550.54.15"
    assert device.extra["cuda_version"] == "12.4"


def test_an_explicit_library_path_wins(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, driver_root: Path, tmp_path: Path
) -> None:
    fake.add_gpus(2)
    handle = nvidia(
        driver_roots=[str(tmp_path / "nothing-here")],
        library_path=str(driver_root / "usr/lib64" / SONAME),
    )
    assert len(handle.detect()) == 2


def test_missing_library_makes_the_vendor_inactive_naming_every_path(
    nvidia: Callable[..., VendorHandle], tmp_path: Path
) -> None:
    root = tmp_path / "host"
    handle = nvidia(start=False, driver_roots=[str(root)])
    with pytest.raises(VendorUnavailable) as caught:
        handle.startup()
    message = str(caught.value)
    assert "vendor 'nvidia' inactive" in message
    for path in candidates(NvidiaConfig(driver_roots=(str(root),), search_loader_path=False)):
        assert path in message
    assert f"{root}/usr/lib64/libnvidia-ml.so.1" in message
    assert "cannot open shared object file" in message  # the loader's own words
    assert "driver root" in message


def test_a_file_that_is_no_library_is_reported_with_the_loaders_reason(
    nvidia: Callable[..., VendorHandle], tmp_path: Path
) -> None:
    bogus = tmp_path / SONAME
    bogus.write_text("not an ELF file")
    handle = nvidia(start=False, library_path=str(bogus), driver_roots=[])
    with pytest.raises(
        VendorUnavailable, match=r"(?s)libnvidia-ml\.so\.1.*(invalid ELF|too short)"
    ):
        handle.startup()


def test_loader_search_is_a_fallback_after_the_roots(tmp_path: Path) -> None:
    config = NvidiaConfig(library_path="/opt/nv/libnvidia-ml.so.1", driver_roots=("/host",))
    paths = candidates(config)
    assert paths[0] == "/opt/nv/libnvidia-ml.so.1"
    assert paths[1] == "/host/usr/lib64/libnvidia-ml.so.1"
    assert paths[-2:] == ["libnvidia-ml.so.1", "libnvidia-ml.so"]
    quiet = candidates(config.model_copy(update={"search_loader_path": False}))
    assert all("/" in p for p in quiet)


def test_nvml_init_failure_says_what_the_driver_said(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml
) -> None:
    fake.fail("nvmlInitWithFlags", DRIVER_NOT_LOADED)
    handle = nvidia(start=False)
    with pytest.raises(VendorUnavailable, match=r"Driver Not Loaded.*kernel driver is not loaded"):
        handle.startup()


def test_invalid_configuration_names_the_key(nvidia: Callable[..., VendorHandle]) -> None:
    handle = nvidia(start=False, share_slots=0, device_list_strategy="volume")
    with pytest.raises(Exception, match=r"share_slots.*device_list_strategy|device_list_strategy"):
        handle.startup()


def test_two_hosts_in_turn_rebind_pynvml_each_time(
    nvidia: Callable[..., VendorHandle], fake: FakeNvml, driver_root: Path, tmp_path: Path
) -> None:
    # A second copy of the library is a different loaded object: pynvml must call into the
    # one this host loaded, not into function pointers cached from the first.
    fake.add_gpus(1)
    first = nvidia()
    assert len(first.detect()) == 1
    first.shutdown()
    copy = tmp_path / "other-root/usr/lib64"
    copy.mkdir(parents=True)
    shutil.copy(driver_root / "usr/lib64" / SONAME, copy / SONAME)
    second = nvidia(driver_roots=[str(tmp_path / "other-root")])
    # The copy has its own (empty) device table.
    assert second.detect() == ()


def test_shutdown_releases_nvml(nvidia: Callable[..., VendorHandle], fake: FakeNvml) -> None:
    fake.add_gpus(1)
    handle = nvidia()
    assert fake.init_count == 1
    handle.shutdown()
    assert fake.init_count == 0


def test_the_plugin_loads_in_a_strict_host_with_the_core_defaults() -> None:
    host = PluginHost(HostSettings(strict=True), core_plugins=CORE_PLUGINS)
    record = host.register("nvidia", plugin)
    try:
        assert record.error is None
        assert "xpushare_fit" in record.hooks
        assert host.vendor_for_resource("nvidia.com/gpumem") is host.vendor("nvidia")
    finally:
        host.close()

"""Fixtures of the NVIDIA plugin's tests: the fake NVML in a driver root, the plugin in a host.

The fake library is compiled once per session into ``<tmp>/driver-root/usr/lib64`` (where a
host's driver root would hold it) and the plugin is configured to find it there only, so
every test runs the real loading path: candidate paths, dlopen on the vendor's library
thread, pynvml bound to that handle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_nvml import SONAME, SOURCE, FakeNvml
from nvidia_kit import NODE, base_config

from xpushare.plugins import VendorHandle
from xpushare.testing.clib import compile_shared_library
from xpushare.testing.hosts import VendorHosts
from xpushare_nvidia import plugin


@pytest.fixture(scope="session")
def driver_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("driver-root")
    compile_shared_library(
        SOURCE.read_text(encoding="utf-8"), root / "usr/lib64", SONAME, extra_args=["-lpthread"]
    )
    return root


@pytest.fixture
def fake(driver_root: Path) -> Iterator[FakeNvml]:
    nvml = FakeNvml(driver_root / "usr/lib64" / SONAME)
    nvml.reset()
    yield nvml
    nvml.reset()


@pytest.fixture
def hami_dir(tmp_path: Path) -> Path:
    """The node's HAMi-core directory as the node agent sees it, with the library in it."""
    path = tmp_path / "vgpu"
    path.mkdir()
    (path / "libvgpu.so").write_bytes(b"\x7fELF placeholder")
    return path


@pytest.fixture
def nvidia(
    driver_root: Path, hami_dir: Path, fake: FakeNvml
) -> Iterator[Callable[..., VendorHandle]]:
    """``nvidia(**config)``: the plugin registered in a strict host; started unless asked."""
    with VendorHosts("nvidia", plugin, node_name=NODE, strict=True) as hosts:

        def make(start: bool = True, **overrides: Any) -> VendorHandle:
            return hosts.handle({**base_config(driver_root, hami_dir), **overrides}, start=start)

        yield make
    assert fake.init_count == 0, "a host left NVML initialised"
    assert fake.thread_violations == 0, "an NVML call ran off the vendor's library thread"

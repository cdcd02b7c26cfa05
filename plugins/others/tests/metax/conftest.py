"""MetaX fixtures: the fake MXSML library, a host tree with /dev and sysfs, the handle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.plugins import VendorHandle
from xpushare_others.metax import plugin

SOURCE = Path(__file__).parent / "fake_mxsml" / "fake_mxsml.c"


@pytest.fixture(scope="session")
def mxsml_lib(tmp_path_factory: pytest.TempPathFactory, compile_fake: Callable[..., Path]) -> Path:
    return compile_fake(SOURCE, tmp_path_factory.mktemp("mxsml"), "libmxsml.so")


@pytest.fixture
def host_tree(tmp_path: Path) -> Path:
    """/dev/mxcd, two GPUs' DRM nodes, and their sysfs entries (NUMA, drm/)."""
    root = tmp_path / "host"
    (root / "dev/dri").mkdir(parents=True)
    for name in (
        "dev/mxcd",
        "dev/dri/card1",
        "dev/dri/card2",
        "dev/dri/renderD129",
        "dev/dri/renderD130",
    ):
        (root / name).touch()
    for i in range(2):
        dev = root / f"sys/bus/pci/devices/0000:{0x30 + i:02x}:00.0"
        (dev / "drm" / f"card{i + 1}").mkdir(parents=True)
        (dev / "drm" / f"renderD{129 + i}").mkdir()
        (dev / "numa_node").write_text(f"{i}\n")
    return root


@pytest.fixture
def metax(
    mxsml_lib: Path, host_tree: Path, handle_for: Callable[..., VendorHandle]
) -> Callable[..., VendorHandle]:
    def make(**config: Any) -> VendorHandle:
        settings: dict[str, Any] = {
            "library_path": str(mxsml_lib),
            "search_loader_path": False,
            "host_root": str(host_tree),
            "sysfs_root": str(host_tree / "sys"),
        }
        settings.update(config)
        return handle_for("metax", plugin.metax, settings)

    return make

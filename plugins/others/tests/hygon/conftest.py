"""Hygon fixtures: the fake ROCm SMI library, a host tree with /dev and sysfs, the handle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.plugins import VendorHandle
from xpushare_others.hygon import plugin

HERE = Path(__file__).parent
SOURCE = HERE / "fake_rsmi" / "fake_rocm_smi.c"


@pytest.fixture(scope="session")
def rsmi_lib(tmp_path_factory: pytest.TempPathFactory, compile_fake: Callable[..., Path]) -> Path:
    return compile_fake(SOURCE, tmp_path_factory.mktemp("rsmi"), "librocm_smi64.so")


@pytest.fixture
def host_tree(tmp_path: Path) -> Path:
    """A host filesystem: /dev nodes of two DCUs, KFD topology (80 CUs each), driver version."""
    root = tmp_path / "host"
    (root / "dev/dri").mkdir(parents=True)
    for name in (
        "dev/kfd",
        "dev/mkfd",
        "dev/dri/card0",
        "dev/dri/card1",
        "dev/dri/renderD128",
        "dev/dri/renderD129",
    ):
        (root / name).touch()
    (root / "opt/hyhal").mkdir(parents=True)
    sys_ = root / "sys"
    (sys_ / "module/hydcu").mkdir(parents=True)
    (sys_ / "module/hydcu/version").write_text("6.2.17\n")
    nodes = sys_ / "class/kfd/kfd/topology/nodes"
    (nodes / "0").mkdir(parents=True)
    (nodes / "0/properties").write_text("cpu_cores_count 64\nsimd_count 0\n")
    for i in range(2):
        node = nodes / str(i + 1)
        node.mkdir()
        location = (0x10 + i) << 8
        node.joinpath("properties").write_text(
            f"simd_count 320\nsimd_per_cu 4\nlocation_id {location}\ndomain 0\n"
        )
    return root


@pytest.fixture
def hygon(
    rsmi_lib: Path,
    host_tree: Path,
    tmp_path: Path,
    handle_for: Callable[..., VendorHandle],
) -> Callable[..., VendorHandle]:
    """``hygon(**config)``: the Hygon vendor on the fake library and the host tree."""

    def make(**config: Any) -> VendorHandle:
        settings: dict[str, Any] = {
            "library_path": str(rsmi_lib),
            "search_loader_path": False,
            "host_root": str(host_tree),
            "sysfs_root": str(host_tree / "sys"),
            "vdev_dir": "/usr/local/vgpu/dcu",
            "vdev_agent_dir": str(tmp_path / "vdev"),
        }
        settings.update(config)
        return handle_for("hygon", plugin.hygon, settings)

    return make

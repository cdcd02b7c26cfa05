"""Kunlun fixtures: the fake XPUML library, a host tree with /dev and sysfs, the handles."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kunlun_fakes import host_tree, node_settings, xpu

from xpushare.plugins import VendorHandle
from xpushare_others.kunlun import plugin

SOURCE = Path(__file__).parent / "fake_xpuml" / "fake_xpuml.c"


@pytest.fixture(scope="session")
def xpuml_lib(tmp_path_factory: pytest.TempPathFactory, compile_fake: Callable[..., Path]) -> Path:
    return compile_fake(SOURCE, tmp_path_factory.mktemp("xpuml"), "libxpuml.so")


@pytest.fixture
def table(table_for: Callable[[str], Any]) -> Any:
    t = table_for("FAKE_XPUML_TABLE")
    t.write(*(xpu(i) for i in range(8)))
    return t


@pytest.fixture
def kunlun(
    xpuml_lib: Path, tmp_path: Path, handle_for: Callable[..., VendorHandle]
) -> Callable[..., VendorHandle]:
    """``kunlun(vendor="kunlun", **config)``: a handle on an 8-XPU host tree."""
    root = host_tree(tmp_path / "host", 8)

    def make(vendor: str = "kunlun", **config: Any) -> VendorHandle:
        if vendor == "kunlun-vxpu":
            config.setdefault("mode", "vxpu")
        obj = plugin.vxpu if vendor == "kunlun-vxpu" else plugin.xpu
        return handle_for(vendor, obj, node_settings(xpuml_lib, root, **config))

    return make

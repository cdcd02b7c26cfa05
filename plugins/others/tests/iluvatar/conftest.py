"""Iluvatar fixtures: the fake IXML library, a host tree with HAMi-core, the handle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.plugins import VendorHandle
from xpushare_others.iluvatar import plugin

SOURCE = Path(__file__).parent / "fake_ixml" / "fake_ixml.c"


@pytest.fixture(scope="session")
def ixml_lib(tmp_path_factory: pytest.TempPathFactory, compile_fake: Callable[..., Path]) -> Path:
    return compile_fake(SOURCE, tmp_path_factory.mktemp("ixml"), "libixml.so")


@pytest.fixture
def iluvatar(
    ixml_lib: Path, tmp_path: Path, handle_for: Callable[..., VendorHandle]
) -> Callable[..., VendorHandle]:
    """``iluvatar(**config)``: the vendor on the fake IXML; the host has HAMi-core."""
    host = tmp_path / "host"
    (host / "usr/local/vgpu").mkdir(parents=True)
    (host / "usr/local/vgpu/libvgpu.so").touch()

    def make(**config: Any) -> VendorHandle:
        settings: dict[str, Any] = {
            "library_path": str(ixml_lib),
            "search_loader_path": False,
            "host_root": str(host),
            "sysfs_root": str(tmp_path / "sys"),
        }
        settings.update(config)
        return handle_for("iluvatar", plugin.iluvatar, settings)

    return make

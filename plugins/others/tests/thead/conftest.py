"""T-Head fixtures: the fake HGML library, a host tree with PPU nodes and HGGC's shims."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.plugins import VendorHandle
from xpushare_others.thead import plugin

SOURCE = Path(__file__).parent / "fake_hgml" / "fake_hgml.c"


@pytest.fixture(autouse=True)
def _no_thead_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XPUSHARE_THEAD_CONFIG", raising=False)
    monkeypatch.delenv("XPUSHARE_THEAD_LIBRARY", raising=False)


@pytest.fixture(scope="session")
def hgml_lib(tmp_path_factory: pytest.TempPathFactory, compile_fake: Callable[..., Path]) -> Path:
    return compile_fake(SOURCE, tmp_path_factory.mktemp("hgml"), "libhgml.so")


@pytest.fixture
def thead_host(tmp_path: Path) -> Path:
    """A host with /dev/alixpu, /dev/alixpu_ctl, /dev/alixpu_ppu0..3 and HGGC's shims."""
    root = tmp_path / "host"
    for name in ["dev/alixpu", "dev/alixpu_ctl", *(f"dev/alixpu_ppu{i}" for i in range(4)),
                 "usr/local/vppu/hggc_quota.so", "usr/local/vppu/hgml_dlsym_hook.so"]:  # fmt: skip
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    return root


@pytest.fixture
def thead(
    hgml_lib: Path, tmp_path: Path, thead_host: Path, handle_for: Callable[..., VendorHandle]
) -> Callable[..., VendorHandle]:
    """``thead(**config)``: the vendor on the fake HGML."""

    def make(**config: Any) -> VendorHandle:
        settings: dict[str, Any] = {
            "library_path": str(hgml_lib),
            "search_loader_path": False,
            "host_root": str(thead_host),
            "sysfs_root": str(tmp_path / "sys"),
        }
        settings.update(config)
        return handle_for("thead", plugin.thead, settings)

    return make

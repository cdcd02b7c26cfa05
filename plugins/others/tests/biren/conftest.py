"""Biren fixtures: the fake BRML library, a host tree with /dev/biren, the handle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.plugins import VendorHandle
from xpushare_others.biren import plugin

SOURCE = Path(__file__).parent / "fake_brml" / "fake_brml.c"


@pytest.fixture(autouse=True)
def _no_biren_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XPUSHARE_BIREN_CONFIG", raising=False)
    monkeypatch.delenv("XPUSHARE_BIREN_LIBRARY", raising=False)


@pytest.fixture(scope="session")
def brml_lib(tmp_path_factory: pytest.TempPathFactory, compile_fake: Callable[..., Path]) -> Path:
    return compile_fake(SOURCE, tmp_path_factory.mktemp("brml"), "libbiren-ml.so")


@pytest.fixture
def biren_host(tmp_path: Path) -> Path:
    """A host with /dev/biren/card_0 to card_7 and /dev/dri/renderD128."""
    root = tmp_path / "host"
    (root / "dev/biren").mkdir(parents=True)
    (root / "dev/dri").mkdir()
    (root / "dev/dri/renderD128").touch()
    for n in range(8):
        (root / f"dev/biren/card_{n}").touch()
    return root


@pytest.fixture
def biren(
    brml_lib: Path, tmp_path: Path, biren_host: Path, handle_for: Callable[..., VendorHandle]
) -> Callable[..., VendorHandle]:
    """``biren(**config)``: the vendor on the fake BRML."""

    def make(**config: Any) -> VendorHandle:
        settings: dict[str, Any] = {
            "library_path": str(brml_lib),
            "search_loader_path": False,
            "host_root": str(biren_host),
            "sysfs_root": str(tmp_path / "sys"),
        }
        settings.update(config)
        return handle_for("biren", plugin.biren, settings)

    return make

"""Vastai fixtures: the fake VAML library, a host tree with die device nodes, the handle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.plugins import VendorHandle
from xpushare_others.vastai import plugin

SOURCE = Path(__file__).parent / "fake_vaml" / "fake_vaml.c"


@pytest.fixture(autouse=True)
def _no_vastai_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XPUSHARE_VASTAI_CONFIG", raising=False)
    monkeypatch.delenv("XPUSHARE_VASTAI_LIBRARY", raising=False)


@pytest.fixture(scope="session")
def vaml_lib(tmp_path_factory: pytest.TempPathFactory, compile_fake: Callable[..., Path]) -> Path:
    return compile_fake(SOURCE, tmp_path_factory.mktemp("vaml"), "libvaml.so")


def vastai_host(root: Path, dies: int, render_base: int = 129) -> Path:
    """A host tree with the nodes of *dies* dies, control nodes and DRM by-path links."""
    dev = root / "dev"
    (dev / "dri" / "by-path").mkdir(parents=True, exist_ok=True)
    for name in ("vatools", "va_sync"):
        (dev / name).touch()
    for n in range(dies):
        for name in (f"vacc{n}", f"va{n}_ctl", f"va_video{n}", f"dri/renderD{render_base + n}"):
            (dev / name).touch()
        link = dev / "dri" / "by-path" / f"platform-va_card_hw.{n}-render"
        link.symlink_to(f"../renderD{render_base + n}")
    return root


@pytest.fixture
def host_tree() -> Callable[..., Path]:
    """``host_tree(root, dies, render_base=129)``: see :func:`vastai_host`."""
    return vastai_host


@pytest.fixture
def vastai(
    vaml_lib: Path, tmp_path: Path, handle_for: Callable[..., VendorHandle]
) -> Callable[..., VendorHandle]:
    """``vastai(**config)``: the vendor on the fake VAML; the host has nodes for 8 dies."""
    host = vastai_host(tmp_path / "host", 8)

    def make(**config: Any) -> VendorHandle:
        settings: dict[str, Any] = {
            "library_path": str(vaml_lib),
            "search_loader_path": False,
            "host_root": str(host),
        }
        settings.update(config)
        return handle_for("vastai", plugin.vastai, settings)

    return make

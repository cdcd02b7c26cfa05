"""Moore Threads fixtures: the fake libmtml the real pymtml binding runs against."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xpushare.plugins import VendorHandle
from xpushare_others.mthreads import plugin

SOURCE = Path(__file__).parent / "fake_mtml" / "fake_mtml.c"


@pytest.fixture(scope="session")
def mtml_lib(tmp_path_factory: pytest.TempPathFactory, compile_fake: Callable[..., Path]) -> Path:
    return compile_fake(SOURCE, tmp_path_factory.mktemp("mtml"), "libmtml.so.2")


@pytest.fixture
def mthreads(
    mtml_lib: Path, tmp_path: Path, handle_for: Callable[..., VendorHandle]
) -> Callable[..., VendorHandle]:
    def make(**config: Any) -> VendorHandle:
        settings: dict[str, Any] = {
            "library_path": str(mtml_lib),
            "search_loader_path": False,
            "sysfs_root": str(tmp_path / "sys"),
        }
        settings.update(config)
        return handle_for("mthreads", plugin.mthreads, settings)

    return make

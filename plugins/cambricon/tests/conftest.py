"""Fixtures for the Cambricon plugin's tests: the fake CNDev compiled from C, its card table,
and a plugin host with the core's defaults and the Cambricon vendor, called the real way.

Every test builds its own host (so its own library thread) and writes its own card table;
the fake re-reads the table on every call. The helpers live in ``cambricon_fakes`` (a
unique module name: test directories share sys.path).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cambricon_fakes import FAKE_NAME, FAKE_SOURCE, FakeTable

import xpushare_cambricon.plugin as cambricon_plugin
from xpushare.plugins import VendorHandle
from xpushare.testing.clib import LibraryVariants
from xpushare.testing.hosts import VendorHosts


@pytest.fixture(scope="session")
def fake_builds(tmp_path_factory: pytest.TempPathFactory) -> LibraryVariants:
    return LibraryVariants(FAKE_SOURCE, tmp_path_factory.mktemp("fake-cndev"), FAKE_NAME)


@pytest.fixture
def fake_lib(fake_builds: LibraryVariants) -> Path:
    return fake_builds.get()


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTable:
    path = tmp_path / "cndev-table.txt"
    monkeypatch.setenv("FAKE_CNDEV_CONFIG", str(path))
    monkeypatch.delenv("XPUSHARE_CAMBRICON_CONFIG", raising=False)
    monkeypatch.delenv("XPUSHARE_CAMBRICON_LIBRARY", raising=False)
    return FakeTable(path)


@pytest.fixture
def cluster_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Write the cluster-wide Cambricon config file (read by xpushare_vendor everywhere)."""

    def write(**settings: Any) -> Path:
        path = tmp_path / "cambricon-config.json"
        path.write_text(json.dumps(settings), encoding="utf-8")
        monkeypatch.setenv("XPUSHARE_CAMBRICON_CONFIG", str(path))
        return path

    return write


@pytest.fixture
def make_handle(tmp_path: Path) -> Iterator[Callable[..., VendorHandle]]:
    """A factory of Cambricon vendor handles on fresh hosts; all are shut down at the end."""
    with VendorHosts("cambricon", cambricon_plugin) as hosts:

        def make(library: Path | None = None, **config: Any) -> VendorHandle:
            settings: dict[str, Any] = {"sysfs_root": str(tmp_path / "sys")}
            if library is not None:
                settings["library_path"] = str(library)
            settings.update(config)
            return hosts.handle(settings)

        yield make

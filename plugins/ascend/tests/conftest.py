"""Fixtures for the Ascend plugin's tests: the fake DCMI compiled from C, its device table,
and a plugin host with the Ascend vendor registered, called through the real path.

Every test builds its own host (so its own library thread) and writes its own device table;
the fake re-reads the table on every call, so a test can change it between calls. The
helpers live in ``ascend_fakes`` (a unique module name: test directories share sys.path).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ascend_fakes import FAKE_NAME, FAKE_SOURCE, FakeTable

import xpushare_ascend.plugin as ascend_plugin
from xpushare.plugins import VendorHandle
from xpushare.testing.clib import LibraryVariants
from xpushare.testing.hosts import VendorHosts


@pytest.fixture(scope="session")
def fake_builds(tmp_path_factory: pytest.TempPathFactory) -> LibraryVariants:
    return LibraryVariants(FAKE_SOURCE, tmp_path_factory.mktemp("fake-dcmi"), FAKE_NAME)


@pytest.fixture
def fake_lib(fake_builds: LibraryVariants) -> Path:
    """The full fake: both API generations."""
    return fake_builds.get()


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTable:
    path = tmp_path / "dcmi-table.txt"
    monkeypatch.setenv("FAKE_DCMI_CONFIG", str(path))
    monkeypatch.delenv("XPUSHARE_ASCEND_CONFIG", raising=False)
    monkeypatch.delenv("XPUSHARE_ASCEND_LIBRARY", raising=False)
    return FakeTable(path)


@pytest.fixture
def cluster_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Write the cluster-wide Ascend config file (read by xpushare_vendor in every process)."""

    def write(**settings: Any) -> Path:
        path = tmp_path / "ascend-config.json"
        path.write_text(json.dumps(settings), encoding="utf-8")
        monkeypatch.setenv("XPUSHARE_ASCEND_CONFIG", str(path))
        return path

    return write


@pytest.fixture
def make_handle(tmp_path: Path) -> Iterator[Callable[..., VendorHandle]]:
    """A factory of Ascend vendor handles on fresh hosts; all are shut down at the end."""
    with VendorHosts("ascend", ascend_plugin, core_plugins=False) as hosts:

        def make(library: Path | None = None, **config: Any) -> VendorHandle:
            settings: dict[str, Any] = {"sysfs_root": str(tmp_path / "sys")}
            if library is not None:
                settings["library_path"] = str(library)
            settings.update(config)
            return hosts.handle(settings)

        yield make

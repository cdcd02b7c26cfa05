"""Enflame fixtures: the fake EFML library, a host tree with /dev and sysfs, the handles."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from enflame_fakes import FakeEfsmi, gcu, host_tree, node_settings

from xpushare.plugins import VendorHandle
from xpushare_others.enflame import plugin

SOURCE = Path(__file__).parent / "fake_efml" / "fake_efml.c"


@pytest.fixture(scope="session")
def efml_lib(tmp_path_factory: pytest.TempPathFactory, compile_fake: Callable[..., Path]) -> Path:
    return compile_fake(SOURCE, tmp_path_factory.mktemp("efml"), "libefml.so")


@pytest.fixture
def table(table_for: Callable[[str], Any]) -> Any:
    t = table_for("FAKE_EFML_TABLE")
    t.write(*(gcu(i) for i in range(4)))
    return t


@pytest.fixture
def efsmi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEfsmi:
    """The fake efsmi, its state kept in this test's directory."""
    fake = FakeEfsmi(tmp_path / "efsmi")
    monkeypatch.setenv("FAKE_EFSMI_STATE", str(fake.state_path))
    return fake


@pytest.fixture
def enflame(
    efml_lib: Path, tmp_path: Path, efsmi: FakeEfsmi, handle_for: Callable[..., VendorHandle]
) -> Callable[..., VendorHandle]:
    """``enflame(vendor="enflame", **config)``: a handle on a 4-GCU host tree (DRS: with the
    fake efsmi and a state directory of the test's own)."""
    root = host_tree(tmp_path / "host", 4)

    def make(vendor: str = "enflame", **config: Any) -> VendorHandle:
        if vendor == "enflame-drs":
            config.setdefault("mode", "drs")
            config.setdefault("efsmi_path", str(efsmi.path))
            config.setdefault("drs_state_dir", str(tmp_path / "drs-state"))
        obj = plugin.drs if vendor == "enflame-drs" else plugin.gcu
        return handle_for(vendor, obj, node_settings(efml_lib, root, **config))

    return make

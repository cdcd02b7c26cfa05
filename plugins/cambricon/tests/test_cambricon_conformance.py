"""The core's vendor conformance suite, run against the Cambricon plugin on the fake CNDev.

The vendor is loaded from its entry point, as on a node, with two MLU370 cards that can be
cut into sMLUs; Allocate goes through the real node agent serving a fake kubelet over unix
sockets (the suite's share becomes an sMLU instance).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from cambricon_fakes import card_line

from xpushare.testing.clib import LibraryVariants
from xpushare.testing.conformance import VendorConformance


class TestCambriconConformance(VendorConformance):
    vendor = "cambricon"

    @pytest.fixture(autouse=True)
    def _library(self, fake_builds: LibraryVariants, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lib = fake_builds.get()
        monkeypatch.delenv("XPUSHARE_CAMBRICON_CONFIG", raising=False)

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        table = tmp_path / "cndev-table.txt"
        table.write_text(f"{card_line(0)}\n{card_line(1)}\n")
        monkeypatch.setenv("FAKE_CNDEV_CONFIG", str(table))
        return {"library_path": str(self.lib), "sysfs_root": str(tmp_path / "sys")}

    def unavailable(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        return {
            "library_path": str(tmp_path / "missing" / "libcndev.so"),
            "neuware_home": str(tmp_path / "no-neuware-here"),
        }

    def created(self, config: Mapping[str, Any]) -> list[str]:
        # The sMLU instances in the fake's table (the fake keeps its state in that file).
        table = Path(os.environ["FAKE_CNDEV_CONFIG"])
        return [line for line in table.read_text().splitlines() if line.startswith("instance")]

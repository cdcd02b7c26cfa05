"""The core's vendor conformance suite, run against the Ascend plugin on the fake libdcmi.so.

The vendor is loaded from its entry point, as on a node, with two 910B3 chips; Allocate goes
through the real node agent serving a fake kubelet over unix sockets.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from ascend_fakes import chip_line

from xpushare.testing.clib import LibraryVariants
from xpushare.testing.conformance import VendorConformance


class TestAscendConformance(VendorConformance):
    vendor = "ascend"

    @pytest.fixture(autouse=True)
    def _library(self, fake_builds: LibraryVariants, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lib = fake_builds.get()
        monkeypatch.delenv("XPUSHARE_ASCEND_CONFIG", raising=False)

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        table = tmp_path / "dcmi-table.txt"
        table.write_text(f"{chip_line(0)}\n{chip_line(1)}\n")
        monkeypatch.setenv("FAKE_DCMI_CONFIG", str(table))
        return {"library_path": str(self.lib), "sysfs_root": str(tmp_path / "sys")}

    def unavailable(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        return {
            "library_path": str(tmp_path / "missing" / "libdcmi.so"),
            "ascend_home": str(tmp_path / "no-ascend-here"),
        }

"""The core's vendor conformance suite, run against the NVIDIA plugin on the fake NVML."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from fake_nvml import SONAME, FakeNvml
from nvidia_kit import base_config

from xpushare.testing.conformance import VendorConformance


class TestNvidiaConformance(VendorConformance):
    vendor = "nvidia"  # loaded from its entry point, as on a node

    @pytest.fixture(autouse=True)
    def _driver_root(self, driver_root: Path) -> None:
        self.root = driver_root

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        fake = FakeNvml(self.root / "usr/lib64" / SONAME)
        fake.reset()
        fake.add_gpus(2)
        fake.nvlink(0, 1, 2)
        hami = tmp_path / "vgpu"
        hami.mkdir()
        (hami / "libvgpu.so").write_bytes(b"\x7fELF placeholder")
        return base_config(self.root, hami)

    def unavailable(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        return {"driver_roots": [str(tmp_path / "no-driver-here")], "search_loader_path": False}

    def created(self, config: Mapping[str, Any]) -> list[str]:
        # HAMi-core's per-container cache directories and the owner files beside them.
        root = Path(config["hami_core"]["agent_dir"])
        return sorted(
            str(p.relative_to(root))
            for sub in ("containers", "xpushare-meta")
            for p in (root / sub).glob("*")
        )

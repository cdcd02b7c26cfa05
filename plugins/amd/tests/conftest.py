"""Fixtures of the AMD plugin's tests: hosts running the plugin on fake libamd_smi libraries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from amd_fakes import FakeGpu, build_library

import xpushare_amd.plugin
from xpushare.plugins import VendorHandle
from xpushare.testing.hosts import VendorHosts


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[..., VendorHandle]]:
    """``started(gpus, **build_options)``: the AMD vendor, started on a fake with *gpus*."""
    with VendorHosts("amd", xpushare_amd.plugin, distribution="xpushare-amd") as hosts:

        def start(gpus: list[FakeGpu], **options: object) -> VendorHandle:
            lib = build_library(tmp_path / f"lib{len(hosts.made)}", gpus, **options)  # type: ignore[arg-type]
            return hosts.handle({"library_path": str(lib)}, start=True)

        yield start

"""Fixtures of the AMD plugin's tests: hosts running the plugin on fake libamd_smi libraries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from amd_fakes import FakeGpu, amd_host, build_library

from xpushare.plugins import PluginHost, VendorHandle


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[..., VendorHandle]]:
    """``started(gpus, **build_options)``: the AMD vendor, started on a fake with *gpus*."""
    hosts: list[PluginHost] = []

    def start(gpus: list[FakeGpu], **options: object) -> VendorHandle:
        lib = build_library(tmp_path / f"lib{len(hosts)}", gpus, **options)  # type: ignore[arg-type]
        host = amd_host(lib)
        hosts.append(host)
        handle = host.vendor("amd")
        handle.startup()
        return handle

    yield start
    for host in hosts:
        host.close()

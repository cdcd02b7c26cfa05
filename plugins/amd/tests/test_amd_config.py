"""The AMD vendor's settings: one validated model for the scheduler and the node agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from amd_fakes import amd_host, build_library, mi300x

from xpushare.errors import VendorUnavailable
from xpushare.models import ContainerView, PodRef, PodView


def test_a_config_file_renames_resources_and_sets_the_compute_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = tmp_path / "amd.yaml"
    settings.write_text(
        "resource_names: {count: example.com/rocm, memory: example.com/rocm-mem,"
        " compute: example.com/rocm-cores}\ndefault_compute_percent: 0\n"
    )
    monkeypatch.setenv("XPUSHARE_AMD_CONFIG", str(settings))
    host = amd_host(None)
    handle = host.vendor("amd")
    assert handle.spec.resource_names.all() == (
        "example.com/rocm",
        "example.com/rocm-mem",
        "example.com/rocm-cores",
    )
    parsed = handle.resource_request(
        pod=PodView(ref=PodRef(name="p")),
        container=ContainerView(name="c", limits={"example.com/rocm-mem": "2048"}),
    )
    assert parsed is not None and parsed.compute_percent == 0 and parsed.memory_mib == 2048
    host.close()


def test_share_slots_reach_the_inventory(tmp_path: Path) -> None:
    host = amd_host(build_library(tmp_path, [mi300x(0)]), share_slots=4)
    try:
        handle = host.vendor("amd")
        handle.startup()
        assert handle.detect()[0].share_slots == 4
    finally:
        host.close()


def test_a_misspelled_setting_makes_the_vendor_inactive_naming_it(tmp_path: Path) -> None:
    host = amd_host(build_library(tmp_path, [mi300x(0)]), share_slot=4)
    try:
        with pytest.raises(VendorUnavailable, match=r"(?s)invalid AMD vendor config.*share_slot"):
            host.vendor("amd").startup()
    finally:
        host.close()

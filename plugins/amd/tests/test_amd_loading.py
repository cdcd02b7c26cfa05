"""Loading ROCm's library and the amdsmi wrapper: every failure is "inactive: why".

Each test compiles its own fake libamd_smi.so (or leaves it out) and starts the vendor
through the plugin host, on the vendor's library thread, as the node agent does.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
from amd_fakes import (
    DRIVER_NOT_LOADED,
    NO_PERM,
    FakeGpu,
    amd_host,
    build_library,
    mi300x,
)

from xpushare.errors import VendorUnavailable


def _reason(host_library: Path | str, **config: object) -> str:
    host = amd_host(host_library, **config)
    try:
        with pytest.raises(VendorUnavailable) as caught:
            host.vendor("amd").startup()
    finally:
        host.close()
    return caught.value.reason


def test_no_library_lists_every_path_tried_and_what_to_do(tmp_path: Path) -> None:
    reason = _reason(tmp_path / "rocm" / "lib", rocm_roots=str(tmp_path / "host-rocm"))
    assert "libamd_smi.so (ROCm's AMD SMI library) could not be loaded" in reason
    assert str(tmp_path / "rocm" / "lib" / "libamd_smi.so") in reason
    assert str(tmp_path / "host-rocm" / "lib" / "libamd_smi.so") in reason
    assert "/opt/rocm/lib/libamd_smi.so" in reason
    assert "amd-smi-lib" in reason and "library_path" in reason


def test_a_file_that_is_not_a_library_is_reported_with_the_loaders_words(
    tmp_path: Path,
) -> None:
    junk = tmp_path / "libamd_smi.so"
    junk.write_text("not an ELF file")
    reason = _reason(junk)
    line = next(line for line in reason.splitlines() if str(junk) in line)
    assert "invalid ELF header" in line or "file too short" in line


def test_a_library_without_a_function_the_wrapper_binds_names_it(tmp_path: Path) -> None:
    lib = build_library(tmp_path, [FakeGpu()], omit={"amdsmi_get_gpu_asic_info"})
    reason = _reason(lib)
    assert "lacks the function amdsmi_get_gpu_asic_info" in reason
    assert "amdsmi 7.0" in reason and "ROCm 7.0" in reason


@pytest.mark.parametrize(
    ("status", "advice"),
    [
        (DRIVER_NOT_LOADED, "amdgpu kernel driver is not loaded"),
        (NO_PERM, "/dev/kfd and /dev/dri"),
    ],
)
def test_init_failures_say_what_to_fix(tmp_path: Path, status: int, advice: str) -> None:
    lib = build_library(tmp_path, [FakeGpu()], init_status=status)
    reason = _reason(lib)
    assert f"amdsmi_init failed in {lib}" in reason
    assert advice in reason


def test_the_library_is_initialised_on_the_vendor_thread_and_shut_down(tmp_path: Path) -> None:
    lib = build_library(tmp_path, [mi300x(0)])
    fake = ctypes.CDLL(str(lib))
    host = amd_host(lib)
    handle = host.vendor("amd")
    handle.startup()
    assert fake.fake_refcount_value() == 1
    assert fake.fake_init_thread() == handle.context.library.native_id
    host.close()
    assert fake.fake_refcount_value() == 0


def test_each_start_binds_its_own_library(tmp_path: Path) -> None:
    # A vendor that found no library can start later in the same process, and two hosts
    # in one process see their own libraries: each start binds a private wrapper.
    assert "could not be loaded" in _reason(tmp_path / "missing")
    one = amd_host(build_library(tmp_path / "one", [mi300x(0)]))
    two = amd_host(build_library(tmp_path / "two", [mi300x(0), mi300x(1), mi300x(2)]))
    try:
        for host in (one, two):
            host.vendor("amd").startup()
        assert len(one.vendor("amd").detect()) == 1
        assert len(two.vendor("amd").detect()) == 3
    finally:
        one.close()
        two.close()


def test_rocm_path_finds_the_library_like_the_wrapper_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_library(tmp_path / "rocm" / "lib", [mi300x(0)])
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    monkeypatch.delenv("ROCM_HOME", raising=False)
    host = amd_host(None)
    try:
        host.vendor("amd").startup()
        assert [d.id for d in host.vendor("amd").detect()] == ["GPU-4d3a0f9e12ab5500"]
    finally:
        host.close()

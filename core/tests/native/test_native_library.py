"""Loading a vendor library on its thread: every failed path reported, symbols checked."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest

from xpushare.native import (
    LibraryNotFound,
    LoadAttempt,
    MissingSymbol,
    NativeError,
    candidate_paths,
)
from xpushare.testing.clib import compile_shared_library

FAKE_VENDOR_C = Path(__file__).with_name("fake_vendor.c").read_text(encoding="utf-8")
OLD_VENDOR_C = "int fake_add(int a, int b) { return a + b; }\n"


def dlerror_for(path: str) -> str:
    """What the dynamic loader itself says about *path*, asked on this thread."""
    process = ctypes.CDLL(None)
    dlopen = process.dlopen
    dlopen.restype = ctypes.c_void_p
    dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    dlerror = process.dlerror
    dlerror.restype = ctypes.c_char_p
    dlerror.argtypes = []
    assert dlopen(os.fsencode(path), os.RTLD_NOW | os.RTLD_LOCAL) is None
    message = dlerror()
    assert message is not None
    return message.decode()


@pytest.fixture
def not_elf(tmp_path):
    path = tmp_path / "libnot-elf.so"
    path.write_text("this is a text file, not a shared library\n" * 4)
    return path


def test_load_gives_a_library_whose_functions_work(thread, fake_lib_path):
    lib = thread.load([fake_lib_path])
    assert lib.path == str(fake_lib_path)
    assert lib.attempts == ()
    assert lib.vendor == "acme"
    assert isinstance(lib.cdll, ctypes.CDLL)
    add = lib.function("fake_add", ctypes.c_int, [ctypes.c_int, ctypes.c_int])
    assert thread.call(add, 2, 3) == 5


def test_dlopen_runs_on_the_library_thread(thread, tmp_path):
    # A private copy: a library already loaded in this process would not run its
    # constructor again.
    path = compile_shared_library(FAKE_VENDOR_C, tmp_path, "libxpushare-fake-ctor.so.1")
    lib = thread.load([path])
    loaded_on = lib.function("fake_loaded_on", ctypes.c_long, [])
    assert thread.call(loaded_on) == thread.native_id
    assert thread.native_id != threading.get_native_id()


def test_failed_candidates_before_the_one_that_loads_are_kept(
    thread, tmp_path, not_elf, fake_lib_path
):
    missing = tmp_path / "libmissing.so.1"
    lib = thread.load([missing, not_elf, fake_lib_path])
    assert lib.path == str(fake_lib_path)
    assert lib.attempts == (
        LoadAttempt(str(missing), dlerror_for(str(missing))),
        LoadAttempt(str(not_elf), dlerror_for(str(not_elf))),
    )


def test_library_not_found_lists_every_path_with_the_loaders_message(thread, tmp_path, not_elf):
    missing = tmp_path / "libmissing.so.1"
    bare = "libxpushare-no-such-library.so.1"
    with pytest.raises(LibraryNotFound) as info:
        thread.load([missing, not_elf, bare])
    error = info.value
    assert isinstance(error, NativeError)
    assert error.vendor == "acme"
    assert [a.path for a in error.attempts] == [str(missing), str(not_elf), bare]
    for attempt in error.attempts:
        assert attempt.error == dlerror_for(attempt.path)
        assert attempt.path in str(error)
        assert attempt.error in str(error)
    assert "No such file or directory" in error.attempts[0].error
    assert "tried 3 path(s)" in str(error)
    assert "Install the acme driver" in str(error)
    assert "library path option" in str(error)


def test_no_candidates_is_reported_as_nothing_configured(thread):
    with pytest.raises(LibraryNotFound) as info:
        thread.load([])
    assert info.value.attempts == []
    assert "no candidate paths were configured" in str(info.value)
    assert "acme" in str(info.value)


def test_a_symbol_the_library_lacks_raises_missing_symbol(thread, tmp_path):
    path = compile_shared_library(OLD_VENDOR_C, tmp_path, "libxpushare-fake-old.so.1")
    lib = thread.load([path])
    assert lib.has("fake_add")
    assert not lib.has("fake_gettid")
    with pytest.raises(MissingSymbol) as info:
        lib.function("fake_gettid", ctypes.c_long, [])
    error = info.value
    assert (error.vendor, error.library, error.symbol) == ("acme", str(path), "fake_gettid")
    assert str(path) in str(error)
    assert "'fake_gettid'" in str(error)
    assert "upgrade the driver" in str(error)


def test_each_function_lookup_has_its_own_declaration(lib):
    as_int = lib.function("fake_add", ctypes.c_int, [ctypes.c_int, ctypes.c_int])
    as_long = lib.function("fake_add", ctypes.c_long, [ctypes.c_long, ctypes.c_long])
    assert as_int is not as_long
    assert as_int.restype is ctypes.c_int
    assert as_int.argtypes == (ctypes.c_int, ctypes.c_int)


def test_load_finds_a_library_under_a_mounted_driver_root(thread, tmp_path):
    soname = "libxpushare-fake-root.so.1"
    expected = compile_shared_library(FAKE_VENDOR_C, tmp_path / "usr" / "lib", soname)
    candidates = candidate_paths([soname], roots=[tmp_path])
    lib = thread.load(candidates)
    assert lib.path == str(expected)
    # usr/lib is the fourth standard directory: the three before it were tried and failed.
    assert [a.path for a in lib.attempts] == candidates[:3]

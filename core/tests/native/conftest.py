"""Fixtures for the native loader's tests: a fake vendor library built with gcc, a library
thread that is always closed, and a gate that holds a C call blocked until the test lets go.
"""

from __future__ import annotations

import ctypes
import os
import select
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from xpushare.native import LibraryThread, NativeLibrary
from xpushare.testing.clib import compile_shared_library

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

FAKE_VENDOR_C = (Path(__file__).parent / "fake_vendor.c").read_text(encoding="utf-8")
FAKE_SONAME = "libxpushare-fake.so.1"
VENDOR = "acme"

# Only bounds a wait that succeeds at once unless the code under test is broken.
SAFETY_S = 10.0


@pytest.fixture(scope="session")
def fake_lib_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_shared_library(FAKE_VENDOR_C, tmp_path_factory.mktemp("fake"), FAKE_SONAME)


@pytest.fixture
def thread() -> Iterator[LibraryThread]:
    library_thread = LibraryThread(VENDOR, default_timeout_s=SAFETY_S)
    yield library_thread
    library_thread.close(timeout_s=SAFETY_S)
    assert library_thread.stopped, "a test left a call blocked on the library thread"


@pytest.fixture
def lib(thread: LibraryThread, fake_lib_path: Path) -> NativeLibrary:
    return thread.load([fake_lib_path])


class Gate:
    """Two pipes around ``fake_block``: it writes to *started* when it begins, and blocks
    reading *release* until the test closes the release pipe's write end."""

    def __init__(self) -> None:
        self.started_r, self.started_w = os.pipe()
        self.release_r, self.release_w = os.pipe()
        self._released = False

    def wait_started(self) -> None:
        ready, _, _ = select.select([self.started_r], [], [], SAFETY_S)
        assert ready, "the blocking C call never started"
        os.read(self.started_r, 1)

    def release(self) -> None:
        """Let every blocked (and every later) ``fake_block`` call return 0 (end of file)."""
        if not self._released:
            self._released = True
            os.close(self.release_w)

    def close(self) -> None:
        self.release()
        for fd in (self.started_r, self.started_w, self.release_r):
            os.close(fd)


@pytest.fixture
def gate(thread: LibraryThread) -> Iterator[Gate]:
    # Depends on `thread` so that it is torn down first: released before the thread closes.
    pipes = Gate()
    yield pipes
    pipes.release()
    assert thread.wait_idle(SAFETY_S)
    pipes.close()


@pytest.fixture
def block(lib: NativeLibrary) -> Callable[[int, int], int]:
    return lib.function("fake_block", ctypes.c_int, [ctypes.c_int, ctypes.c_int])


@pytest.fixture
def add(lib: NativeLibrary) -> Callable[[int, int], int]:
    return lib.function("fake_add", ctypes.c_int, [ctypes.c_int, ctypes.c_int])


@pytest.fixture
def gettid(lib: NativeLibrary) -> Callable[[], int]:
    return lib.function("fake_gettid", ctypes.c_long, [])

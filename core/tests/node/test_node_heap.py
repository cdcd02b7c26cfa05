"""The agent gives back the heap its start-up freed, where the C library can."""

from __future__ import annotations

import platform

from xpushare.node.heap import release_free_heap


def test_the_free_heap_is_handed_back_under_glibc() -> None:
    # The image (python:3.11-slim, Debian) and CI run glibc; elsewhere nothing is done.
    assert release_free_heap() is (platform.libc_ver()[0] == "glibc")

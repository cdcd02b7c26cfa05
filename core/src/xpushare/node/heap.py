"""Give the C heap that start-up freed back to the operating system, once.

Why: starting the agent builds and drops a great deal (every module's code, the vendors'
entry points read from every installed distribution's metadata, pydantic's validators,
protobuf descriptors, the first detection). glibc's allocator keeps the freed pages of its
heap mapped until the top of the heap is free, so they stay in the agent's resident memory
for its whole life: some 1.5 MiB of the 64 MiB budget (docs/benchmarks.md, the node agent's
memory). ``malloc_trim(0)`` returns every whole free page. It exists in glibc only: under
another C library (musl) nothing is done.
"""

from __future__ import annotations

import ctypes
import gc
import logging

log = logging.getLogger(__name__)


def release_free_heap() -> bool:
    """Collect garbage, then hand free heap pages back; whether the C library could."""
    gc.collect()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True

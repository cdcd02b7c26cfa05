"""The native-library loader: each vendor's C library lives on one OS thread of its own.

Why this package exists: vendor management libraries (libnvidia-ml, libamd_smi, libdcmi,
libcndev, ...) keep per-thread state (``dlerror``, ``errno``, "last error") and are mostly
not thread-safe, while xpushare serves gRPC and HTTP from an asyncio loop and other threads.
So every vendor gets a :class:`LibraryThread` that loads its library and makes every call
into it, with timeouts, for the life of the process; node-side hooks run on that thread and
receive a :class:`NodeContext`. It sits at the bottom of the import layers: it imports only
:mod:`xpushare.errors` and the standard library.
"""

from xpushare.native.context import NodeContext
from xpushare.native.errors import (
    LibraryNotFound,
    LibraryThreadClosed,
    LibraryThreadStuck,
    LoadAttempt,
    MissingSymbol,
    NativeCallTimeout,
    NativeError,
    NotOnLibraryThread,
)
from xpushare.native.library import DEFAULT_DLOPEN_MODE, NativeLibrary
from xpushare.native.paths import STANDARD_LIBRARY_DIRS, candidate_paths
from xpushare.native.thread import LibraryThread

__all__ = [
    "DEFAULT_DLOPEN_MODE",
    "STANDARD_LIBRARY_DIRS",
    "LibraryNotFound",
    "LibraryThread",
    "LibraryThreadClosed",
    "LibraryThreadStuck",
    "LoadAttempt",
    "MissingSymbol",
    "NativeCallTimeout",
    "NativeError",
    "NativeLibrary",
    "NodeContext",
    "NotOnLibraryThread",
    "candidate_paths",
]

"""What can go wrong between xpushare and a vendor's native library, one class per case.

Why a hierarchy of its own: a missing library, a missing symbol, a hung driver call and a
closed library thread call for different actions from the operator (install the driver,
upgrade it, restart the node agent) and from the host (mark the vendor inactive, degraded or
stopped). Each message names the vendor and says what to do::

    XpushareError
    └── NativeError
        ├── LibraryNotFound       no candidate path could be loaded (every attempt listed)
        ├── MissingSymbol         the library lacks a function the plugin needs
        ├── NativeCallTimeout     a call ran past its timeout; the library thread is now stuck
        ├── LibraryThreadStuck    refused at once: an earlier call timed out and still runs
        ├── LibraryThreadClosed   refused: the library thread was closed
        └── NotOnLibraryThread    library work started from a thread that does not own it
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xpushare.errors import XpushareError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime


class NativeError(XpushareError):
    """Base of every error raised while loading or calling a vendor's native library."""


@dataclass(frozen=True)
class LoadAttempt:
    """One path the loader tried, and what the dynamic loader said about it (``dlerror``)."""

    path: str
    error: str


class LibraryNotFound(NativeError):
    """None of the candidate paths of a vendor's library could be loaded."""

    def __init__(self, vendor: str, attempts: Sequence[LoadAttempt]) -> None:
        self.vendor = vendor
        self.attempts = list(attempts)
        if self.attempts:
            tried = "".join(f"\n  - {a.path}\n      {a.error}" for a in self.attempts)
            what = f"tried {len(self.attempts)} path(s):{tried}"
        else:
            what = "no candidate paths were configured, so nothing was tried"
        super().__init__(
            f"vendor {vendor!r}: native library not found; {what}\n"
            f"Install the {vendor} driver on this node, or set the {vendor} vendor's library "
            "path option (or driver root) to where its library is mounted in this container."
        )


class MissingSymbol(NativeError):
    """A loaded library does not export a function the vendor plugin needs."""

    def __init__(self, vendor: str, library: str, symbol: str, detail: str = "") -> None:
        self.vendor = vendor
        self.library = library
        self.symbol = symbol
        said = f" ({detail})" if detail else ""
        super().__init__(
            f"vendor {vendor!r}: symbol {symbol!r} not found in {library}{said}. The library "
            "is older (or other) than the plugin expects: upgrade the driver, or point the "
            "vendor's library path option at the vendor's own library."
        )


class NativeCallTimeout(NativeError):
    """A call ran on the library thread for longer than its timeout.

    The call cannot be interrupted (Python cannot stop a thread, and a driver call may sit in
    the kernel), so it keeps running; until it returns, the library thread is *stuck* and
    refuses new calls with :class:`LibraryThreadStuck`.
    """

    def __init__(self, vendor: str, call: str, timeout_s: float) -> None:
        self.vendor = vendor
        self.call = call
        self.timeout_s = timeout_s
        super().__init__(
            f"vendor {vendor!r}: native call {call!r} did not return within {timeout_s:g} s. "
            "It is still running; the vendor's library thread refuses further calls until it "
            "returns. If it never does, the driver is hung: check the kernel log (dmesg) and "
            "the device's health, and restart the node agent."
        )


class LibraryThreadStuck(NativeError):
    """A call was refused because an earlier call timed out and has not returned yet."""

    def __init__(self, vendor: str, call: str, since: datetime, timeout_s: float) -> None:
        self.vendor = vendor
        self.call = call
        self.since = since
        self.timeout_s = timeout_s
        super().__init__(
            f"vendor {vendor!r}: library thread is stuck in native call {call!r}, running "
            f"since {since.isoformat(timespec='seconds')} (past its {timeout_s:g} s timeout); "
            "no call is made to this vendor's library until it returns. If it stays stuck, "
            "the driver is hung: check the kernel log (dmesg) and restart the node agent."
        )


class LibraryThreadClosed(NativeError):
    """A call was refused because the vendor's library thread was closed."""

    def __init__(self, vendor: str) -> None:
        self.vendor = vendor
        super().__init__(
            f"vendor {vendor!r}: library thread is closed and takes no more calls; this is "
            "expected only while the process shuts down (a call after that is a bug in the "
            "caller)."
        )


class NotOnLibraryThread(NativeError):
    """Work that must run on a vendor's library thread was started on another thread."""

    def __init__(self, vendor: str, what: str, thread_name: str) -> None:
        self.vendor = vendor
        self.what = what
        self.thread_name = thread_name
        super().__init__(
            f"vendor {vendor!r}: {what} must run on the vendor's library thread, but was "
            f"called on thread {thread_name!r}. Call it from a node-side hook (the host runs "
            "those on the library thread) or through LibraryThread.call()."
        )

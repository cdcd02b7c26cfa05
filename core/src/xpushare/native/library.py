"""A vendor library loaded on its library thread, and the loader that tries candidate paths.

Why a wrapper around ``ctypes.CDLL``: the loader must report *every* path it tried with the
dynamic loader's own words, read on the thread that called ``dlopen`` (``dlerror`` is
per-thread); a missing function must name the vendor, the library and the symbol; and symbol
lookups (``dlsym``, again with ``dlerror``) belong on the library thread like every other use
of the library.
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from xpushare.native.errors import LibraryNotFound, LoadAttempt, MissingSymbol

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

T = TypeVar("T")

#: ``dlopen`` flags. RTLD_NOW: an unresolved symbol fails the load, with dlerror's message,
#: instead of a later call. RTLD_LOCAL: one vendor's symbols cannot satisfy (or clash with)
#: another's, since all vendors' libraries share the process.
DEFAULT_DLOPEN_MODE: Final[int] = os.RTLD_NOW | os.RTLD_LOCAL


class LibraryCaller(Protocol):
    """What a library needs of the thread that loaded it (a ``LibraryThread``): its
    vendor's name and a way to run a call on it. A protocol, so this module and
    thread.py, which loads through :func:`open_first`, do not import each other."""

    @property
    def vendor(self) -> str: ...

    def call(self, fn: Callable[..., T], /, *args: Any, timeout_s: float | None = None) -> T: ...


class NativeLibrary:
    """A library loaded by :meth:`LibraryThread.load`; use it on that thread.

    The functions returned by :meth:`function` are plain ctypes functions: call them on the
    library thread (node-side hooks already run there; elsewhere use
    :meth:`LibraryThread.call`). Libraries are loaded with ``use_errno=True``, so
    ``ctypes.get_errno()`` right after a call, in the same thread, is that call's ``errno``.
    """

    def __init__(
        self,
        thread: LibraryCaller,
        path: str,
        attempts: tuple[LoadAttempt, ...],
        cdll: ctypes.CDLL,
    ) -> None:
        self.thread = thread
        #: The candidate that loaded (as given: a path, or a soname the loader resolved).
        self.path = path
        #: The candidates that failed before it, with the loader's message for each.
        self.attempts = attempts
        self.cdll = cdll

    @property
    def vendor(self) -> str:
        return self.thread.vendor

    def function(self, name: str, restype: Any, argtypes: Sequence[Any]) -> Callable[..., Any]:
        """Look up the C function *name* and declare its result and argument types.

        Each call returns a new function object, so two plugins (or two declarations) never
        share ``restype``/``argtypes``/``errcheck``.

        :raises MissingSymbol: the library does not export *name*.
        """
        return self.thread.call(self._lookup, name, restype, tuple(argtypes))

    def has(self, name: str) -> bool:
        """Whether the library exports *name* (e.g. a function newer drivers add)."""
        return self.thread.call(self._exports, name)

    def _lookup(self, name: str, restype: Any, argtypes: tuple[Any, ...]) -> Callable[..., Any]:
        try:
            # Indexing, unlike attribute access, does not cache the function on the CDLL.
            fn = self.cdll[name]
        except AttributeError as exc:
            raise MissingSymbol(self.vendor, self.path, name, str(exc)) from exc
        fn.restype = restype
        fn.argtypes = argtypes
        return fn

    def _exports(self, name: str) -> bool:
        try:
            self.cdll[name]
        except AttributeError:
            return False
        return True

    def __repr__(self) -> str:
        return f"<NativeLibrary {self.vendor!r} {self.path!r}>"


def open_first(thread: LibraryCaller, paths: Sequence[str], mode: int) -> NativeLibrary:
    """Load the first of *paths* that ``dlopen`` accepts; run on *thread* (see its ``load``)."""
    attempts: list[LoadAttempt] = []
    for path in paths:
        try:
            cdll = ctypes.CDLL(path, mode=mode, use_errno=True)
        except OSError as exc:
            # ctypes read dlerror() on this thread right after the failed dlopen.
            attempts.append(LoadAttempt(path, str(exc)))
            continue
        return NativeLibrary(thread, path, tuple(attempts), cdll)
    raise LibraryNotFound(thread.vendor, attempts)

"""One OS thread per vendor library: every load and every call of that library runs on it.

Why: ``dlerror`` and ``errno`` are per-thread state, and most vendor management libraries
(DCMI, CNDev, IXML, ...) promise no thread safety, or keep a per-thread "last error". Pinning
all work of one vendor to one thread makes init, handles, error state and shutdown safe by
construction; callers on any thread (or on the asyncio loop) hand their work to it.

Timeouts: a foreign call cannot be interrupted (Python cannot stop a thread, and a driver call
may wait in the kernel). So a watchdog marks a call that runs past its timeout as *stuck*:
its caller gets :class:`NativeCallTimeout`, the calls queued behind it and every new call get
:class:`LibraryThreadStuck` at once, and when the stuck call finally returns the thread takes
calls again. A call's timeout bounds how long it *runs*; time spent queued behind earlier
calls is bounded by those calls' own timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import math
import os
import threading
import time
from collections import deque
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from xpushare.native.errors import (
    LibraryThreadClosed,
    LibraryThreadStuck,
    NativeCallTimeout,
)
from xpushare.native.library import DEFAULT_DLOPEN_MODE, open_first

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from xpushare.native.library import NativeLibrary

_log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


class _Job:
    """One call handed to the library thread, with its timing and outcome."""

    __slots__ = (
        "args",
        "context",
        "deadline",
        "error",
        "fn",
        "future",
        "kwargs",
        "name",
        "started",
        "timeout_s",
        "value",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        name: str,
        timeout_s: float,
    ) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.name = name
        self.timeout_s = timeout_s
        # The caller's context variables (request ids, log context) follow the call.
        self.context = contextvars.copy_context()
        self.future: Future[Any] = Future()
        self.deadline = math.inf
        self.started = datetime.fromtimestamp(0, UTC)
        self.value: Any = None
        self.error: BaseException | None = None

    def start(self) -> None:
        self.deadline = time.monotonic() + self.timeout_s
        self.started = datetime.now(UTC)

    def run(self) -> None:
        try:
            self.value = self.context.run(self.fn, *self.args, **self.kwargs)
        except BaseException as exc:  # handed to the caller unchanged, whatever it is
            self.error = exc


def _call_name(fn: Callable[..., Any]) -> str:
    """The name a call is reported under: the C symbol for a ctypes function."""
    if isinstance(fn, functools.partial):
        return _call_name(fn.func)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name if isinstance(name, str) else repr(fn)


def _checked_timeout(timeout_s: float) -> float:
    if not timeout_s > 0:  # also rejects NaN
        raise ValueError(f"a timeout must be a positive number of seconds, got {timeout_s!r}")
    return timeout_s


def _wake_waiter(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None], _: object) -> None:
    # A closed loop raises RuntimeError: nobody is waiting any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_settle_waiter, waiter)


def _settle_waiter(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class LibraryThread:
    """The dedicated OS thread that loads and calls one vendor's native library.

    Started by the constructor; lives until :meth:`close` (or the end of the process: it is a
    daemon thread, so a call stuck in a driver never blocks the process from exiting).
    Usable as a context manager that closes it.

    :param vendor: the vendor name, used in the thread name and in every error.
    :param default_timeout_s: how long a call may run when the caller gives no timeout.
    """

    def __init__(self, vendor: str, *, default_timeout_s: float = 10.0) -> None:
        self.vendor = vendor
        self.default_timeout_s = _checked_timeout(default_timeout_s)
        # One lock guards the queue, the current and stuck jobs, the flags, and every state
        # change of a job's future, so that "timed out" and "returned" cannot both happen.
        self._lock = threading.Lock()
        self._work_ready = threading.Condition(self._lock)
        self._watch_ready = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._queue: deque[_Job] = deque()
        self._current: _Job | None = None
        self._stuck: _Job | None = None
        self._closing = False
        self._finished = False
        self._worker = threading.Thread(
            target=self._work, name=f"xpushare-lib-{vendor}", daemon=True
        )
        self._watchdog = threading.Thread(
            target=self._watch, name=f"xpushare-lib-{vendor}-watchdog", daemon=True
        )
        self._worker.start()
        self._watchdog.start()
        native_id = self._worker.native_id  # set before start() returns
        if native_id is None:  # pragma: no cover - only on platforms without native ids
            raise RuntimeError("this platform does not report native thread ids")
        self.native_id: int = native_id

    # ----------------------------------------------------------------------------------------
    # Calling
    # ----------------------------------------------------------------------------------------

    # mypy rejects keyword-only parameters between *args: P.args and **kwargs: P.kwargs (PEP
    # 612); the ignore keeps the return type checked and the arguments unchecked.
    def call(  # type: ignore[valid-type]
        self,
        fn: Callable[P, T],
        /,
        *args: P.args,
        timeout_s: float | None = None,
        **kwargs: P.kwargs,
    ) -> T:
        """Run ``fn(*args, **kwargs)`` on the library thread and return its result.

        Blocks the calling thread. Exceptions from *fn* are raised unchanged. Called from
        the library thread itself (e.g. inside a hook), *fn* runs directly.

        :param timeout_s: how long *fn* may run (default: ``default_timeout_s``).
        :raises NativeCallTimeout: *fn* ran longer; the thread is now stuck.
        :raises LibraryThreadStuck: an earlier call timed out and still runs.
        :raises LibraryThreadClosed: :meth:`close` was called.
        """
        return self._run(fn, args, kwargs, timeout_s)

    async def acall(  # type: ignore[valid-type]
        self,
        fn: Callable[P, T],
        /,
        *args: P.args,
        timeout_s: float | None = None,
        **kwargs: P.kwargs,
    ) -> T:
        """Like :meth:`call`, but awaitable: the event loop keeps running meanwhile.

        Cancelling the awaiting task drops the call if it has not started; a call that has
        started runs to its end (it cannot be interrupted) and its result is discarded.
        """
        if self.owns_current_thread():
            return fn(*args, **kwargs)
        future: Future[T] = self._submit(fn, args, kwargs, timeout_s)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        future.add_done_callback(functools.partial(_wake_waiter, loop, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:
                future.cancel()
            raise
        # Not asyncio.wrap_future: it would replace some exceptions of fn (TimeoutError,
        # concurrent.futures.CancelledError) by new asyncio ones.
        return future.result()

    def load(
        self,
        candidates: Sequence[str | os.PathLike[str]],
        *,
        mode: int = DEFAULT_DLOPEN_MODE,
        timeout_s: float | None = None,
    ) -> NativeLibrary:
        """Load the first candidate that the dynamic loader accepts, on the library thread.

        Each candidate is a path or a bare soname (found by the dynamic loader's search).

        :raises LibraryNotFound: no candidate loaded (every path and ``dlerror`` listed), or
            *candidates* is empty.
        """
        paths = [os.fspath(c) for c in candidates]
        return self._run(open_first, (self, paths, mode), {}, timeout_s, "load")

    # ----------------------------------------------------------------------------------------
    # State and life cycle
    # ----------------------------------------------------------------------------------------

    def owns_current_thread(self) -> bool:
        """Whether the caller is running on this library thread."""
        return threading.get_ident() == self._worker.ident

    @property
    def stuck(self) -> str | None:
        """The call that timed out and still runs, described for people; ``None`` if none."""
        with self._lock:
            job = self._stuck
            if job is None:
                return None
            return (
                f"{job.name!r} running since {job.started.isoformat(timespec='seconds')} "
                f"(past its {job.timeout_s:g} s timeout)"
            )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (the thread may still finish queued calls)."""
        with self._lock:
            return self._closing

    @property
    def stopped(self) -> bool:
        """Whether the OS thread has exited (after :meth:`close` and the last queued call)."""
        return not self._worker.is_alive()

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Block until no call runs or waits (a stuck call has returned); ``False`` on timeout.

        Meant for shutdown and tests; it must not be called on the library thread itself,
        which would wait for its own call.
        """
        if self.owns_current_thread():
            raise RuntimeError(
                f"vendor {self.vendor!r}: wait_idle() on the library thread would wait for itself"
            )
        with self._lock:
            return self._idle.wait_for(lambda: self._current is None and not self._queue, timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread once the calls already queued have run; later calls are refused.

        Waits up to *timeout_s* for the thread to exit (``0``: do not wait). A stuck call
        cannot be stopped: the daemon thread is then left to finish it, with a warning.
        Calling it again is harmless and waits again.
        """
        with self._lock:
            self._closing = True
            self._work_ready.notify_all()
        if self.owns_current_thread():
            return  # the thread stops after the call it is running now
        self._worker.join(timeout_s)
        if self._worker.is_alive():
            if timeout_s > 0:
                _log.warning(
                    "vendor %r: library thread did not stop within %g s (current call: %s)",
                    self.vendor,
                    timeout_s,
                    self.stuck or "still running",
                )
            return
        self._watchdog.join(timeout_s)

    def __enter__(self) -> LibraryThread:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        with self._lock:
            if self._closing:
                state = "closed"
            elif self._stuck is not None:
                state = f"stuck in {self._stuck.name!r}"
            elif self._current is not None:
                state = f"running {self._current.name!r}"
            else:
                state = "idle"
        return f"<LibraryThread {self.vendor!r} native_id={self.native_id} {state}>"

    # ----------------------------------------------------------------------------------------
    # Internals
    # ----------------------------------------------------------------------------------------

    def _run(
        self,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        timeout_s: float | None,
        name: str | None = None,
    ) -> T:
        if self.owns_current_thread():
            return fn(*args, **kwargs)
        future: Future[T] = self._submit(fn, args, kwargs, timeout_s, name)
        return future.result()

    def _submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        timeout_s: float | None,
        name: str | None = None,
    ) -> Future[Any]:
        timeout = self.default_timeout_s if timeout_s is None else _checked_timeout(timeout_s)
        job = _Job(fn, args, kwargs, name or _call_name(fn), timeout)
        with self._lock:
            if self._closing:
                raise LibraryThreadClosed(self.vendor)
            if self._stuck is not None:
                raise self._stuck_error(self._stuck)
            self._queue.append(job)
            self._work_ready.notify()
        return job.future

    def _stuck_error(self, job: _Job) -> LibraryThreadStuck:
        return LibraryThreadStuck(self.vendor, job.name, job.started, job.timeout_s)

    def _work(self) -> None:
        """The library thread: run queued jobs one by one until closed and drained."""
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._work_ready.wait()
                if not self._queue:
                    self._finished = True
                    self._watch_ready.notify_all()
                    self._idle.notify_all()
                    return
                job = self._queue.popleft()
                if not job.future.set_running_or_notify_cancel():  # cancelled while queued
                    self._idle.notify_all()
                    continue
                job.start()
                self._current = job
                self._watch_ready.notify_all()
            job.run()
            with self._lock:
                self._current = None
                if self._stuck is job:
                    self._stuck = None
                    _log.warning(
                        "vendor %r: stuck native call %r returned after %.1f s; the library "
                        "thread takes calls again",
                        self.vendor,
                        job.name,
                        (datetime.now(UTC) - job.started).total_seconds(),
                    )
                elif job.error is not None:
                    job.future.set_exception(job.error)
                else:
                    job.future.set_result(job.value)
                self._idle.notify_all()
            # The caller holds the outcome now; keep neither it nor fn's arguments alive
            # (an exception's traceback would also form a cycle through this frame).
            del job

    def _watch(self) -> None:
        """The watchdog: mark the running job stuck when it passes its deadline."""
        with self._lock:
            while not self._finished:
                job = self._current
                if job is None or job is self._stuck:
                    self._watch_ready.wait()
                    continue
                remaining = job.deadline - time.monotonic()
                if remaining > 0:
                    self._watch_ready.wait(None if math.isinf(remaining) else remaining)
                    continue
                self._time_out(job)

    def _time_out(self, job: _Job) -> None:
        """Mark *job* stuck, tell its caller, and refuse the calls queued behind it."""
        self._stuck = job
        job.future.set_exception(NativeCallTimeout(self.vendor, job.name, job.timeout_s))
        _log.warning(
            "vendor %r: native call %r passed its %g s timeout; library thread stuck",
            self.vendor,
            job.name,
            job.timeout_s,
        )
        # Each refused caller gets its own exception object: one raised in several threads
        # at once would share (and overwrite) a traceback.
        for queued in self._queue:
            if not queued.future.cancelled():
                queued.future.set_exception(self._stuck_error(job))
        self._queue.clear()
        self._idle.notify_all()

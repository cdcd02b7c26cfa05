"""LibraryThread: one OS thread runs every call, timeouts mark it stuck, close drains it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import ctypes
import errno
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from xpushare.native import (
    LibraryThread,
    LibraryThreadClosed,
    LibraryThreadStuck,
    NativeCallTimeout,
    NativeError,
)

VENDOR = "acme"  # the `thread` fixture's vendor
# Expected timeouts are short so that tests that wait for one stay fast.
SHORT_TIMEOUT_S = 0.2
# Only bounds a wait that succeeds at once unless the code under test is broken.
SAFETY_S = 10.0

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")


# --------------------------------------------------------------------------------------------
# Every call runs on the one OS thread
# --------------------------------------------------------------------------------------------


def test_worker_is_a_named_daemon_thread_with_its_native_id(thread):
    worker = thread.call(threading.current_thread)
    assert worker.name == f"xpushare-lib-{VENDOR}"
    assert worker.daemon
    assert thread.call(threading.get_native_id) == thread.native_id
    assert thread.native_id != threading.get_native_id()


def test_c_calls_from_many_python_threads_run_on_one_os_thread(thread, gettid):
    # The C side tells OS threads apart: called directly it reports this thread.
    assert gettid() == threading.get_native_id()
    with ThreadPoolExecutor(max_workers=6) as pool:
        seen = set(pool.map(lambda _: thread.call(gettid), range(60)))
    assert seen == {thread.native_id}


async def test_acall_runs_on_the_same_os_thread(thread, gettid):
    seen = await asyncio.gather(*(thread.acall(gettid) for _ in range(20)))
    assert set(seen) == {thread.native_id}


def test_per_thread_library_state_is_shared_by_all_callers(thread, lib):
    set_last = lib.function("fake_set_last_error", None, [ctypes.c_int])
    get_last = lib.function("fake_get_last_error", ctypes.c_int, [])
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(thread.call, set_last, 42).result()
    assert thread.call(get_last) == 42
    # The same C variable, read on this thread, is another thread's copy.
    assert get_last() == 0


def test_errno_read_inside_the_call_is_that_calls_errno(thread, lib):
    fail = lib.function("fake_fail_with_errno", ctypes.c_int, [ctypes.c_int])

    def fail_and_read_errno(code: int) -> tuple[int, int]:
        return fail(code), ctypes.get_errno()

    assert thread.call(fail_and_read_errno, errno.EACCES) == (-1, errno.EACCES)
    assert thread.call(fail_and_read_errno, errno.ENOENT) == (-1, errno.ENOENT)


def test_arguments_keywords_and_context_variables_reach_the_call(thread):
    def describe(a: int, *, b: str) -> str:
        return f"{a}-{b}-{request_id.get()}"

    request_id.set("req-7")
    assert thread.call(describe, 1, b="x") == "1-x-req-7"


@pytest.mark.parametrize(
    "error",
    [
        ValueError("plain"),
        # asyncio.wrap_future would replace these two with new asyncio exceptions.
        TimeoutError("the plugin's own timeout"),
        concurrent.futures.CancelledError("the plugin's own"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_exceptions_are_raised_unchanged(thread, error):
    def fail() -> None:
        raise error

    with pytest.raises(type(error)) as sync_info:
        thread.call(fail)
    assert sync_info.value is error
    with pytest.raises(type(error)) as async_info:
        await thread.acall(fail)
    assert async_info.value is error


def test_call_from_the_library_thread_runs_directly(thread):
    def nested() -> int:
        return thread.call(threading.get_native_id, timeout_s=SAFETY_S)

    assert thread.call(nested) == thread.native_id


@pytest.mark.parametrize("bad", [0, -1.0, math.nan])
def test_timeouts_must_be_positive(thread, bad):
    with pytest.raises(ValueError, match="positive"):
        thread.call(int, timeout_s=bad)
    with pytest.raises(ValueError, match="positive"):
        LibraryThread("bad", default_timeout_s=bad)


# --------------------------------------------------------------------------------------------
# Timeouts: stuck, refused, usable again
# --------------------------------------------------------------------------------------------


def test_timeout_marks_the_thread_stuck_until_the_call_returns(thread, gate, block, add):
    before = datetime.now(UTC).replace(microsecond=0)
    with pytest.raises(NativeCallTimeout) as timed_out:
        thread.call(block, gate.started_w, gate.release_r, timeout_s=SHORT_TIMEOUT_S)
    assert (timed_out.value.vendor, timed_out.value.call) == (VENDOR, "fake_block")
    assert timed_out.value.timeout_s == SHORT_TIMEOUT_S
    assert isinstance(timed_out.value, NativeError)
    assert "'fake_block'" in str(timed_out.value)
    assert "acme" in str(timed_out.value)

    assert thread.stuck is not None
    assert "'fake_block'" in thread.stuck

    with pytest.raises(LibraryThreadStuck) as refused:
        thread.call(add, 1, 2)
    assert (refused.value.vendor, refused.value.call) == (VENDOR, "fake_block")
    assert before <= refused.value.since <= datetime.now(UTC)
    assert refused.value.since.isoformat(timespec="seconds") in str(refused.value)
    assert "'fake_block'" in str(refused.value)

    gate.release()
    assert thread.wait_idle(SAFETY_S)
    assert thread.stuck is None
    assert thread.call(add, 2, 3) == 5


async def test_acall_timeout_and_stuck_refusal(thread, gate, block, add):
    with pytest.raises(NativeCallTimeout):
        await thread.acall(block, -1, gate.release_r, timeout_s=SHORT_TIMEOUT_S)
    with pytest.raises(LibraryThreadStuck):
        await thread.acall(add, 1, 2)
    gate.release()
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, thread.wait_idle, SAFETY_S)
    assert await thread.acall(add, 1, 2) == 3


def test_calls_queued_behind_a_call_that_times_out_are_refused(thread, gate, block, add):
    with ThreadPoolExecutor(max_workers=1) as pool:
        blocked = pool.submit(
            thread.call, block, gate.started_w, gate.release_r, timeout_s=SHORT_TIMEOUT_S
        )
        gate.wait_started()
        # Queued behind the blocked call (or, on a very slow machine, refused at once).
        with pytest.raises(LibraryThreadStuck):
            thread.call(add, 1, 2)
        with pytest.raises(NativeCallTimeout):
            blocked.result()


async def test_a_timeout_bounds_running_time_not_time_spent_queued(thread, gate, block, add):
    loop = asyncio.get_running_loop()
    first = asyncio.create_task(thread.acall(block, gate.started_w, gate.release_r))
    await loop.run_in_executor(None, gate.wait_started)
    queued = asyncio.create_task(thread.acall(add, 1, 2, timeout_s=SHORT_TIMEOUT_S))
    # Longer than the queued call's timeout: it must still be waiting, not failed.
    done, _ = await asyncio.wait({queued}, timeout=2 * SHORT_TIMEOUT_S)
    assert not done
    assert thread.stuck is None
    gate.release()
    assert await first == 0
    assert await queued == 3


async def test_acall_leaves_the_event_loop_running(thread, gate, block):
    loop = asyncio.get_running_loop()
    blocked = asyncio.create_task(thread.acall(block, gate.started_w, gate.release_r))
    # Only a free event loop gets here and releases the call.
    await loop.run_in_executor(None, gate.wait_started)
    gate.release()
    assert await blocked == 0


async def test_cancelled_acall_that_has_not_started_never_runs(thread, gate, block):
    loop = asyncio.get_running_loop()
    first = asyncio.create_task(thread.acall(block, gate.started_w, gate.release_r))
    await loop.run_in_executor(None, gate.wait_started)
    ran: list[str] = []
    second = asyncio.create_task(thread.acall(ran.append, "ran"))
    await asyncio.sleep(0)  # lets `second` queue its call
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    gate.release()
    assert await first == 0
    assert await thread.acall(len, ran) == 0  # runs after the cancelled call's turn
    assert ran == []


# --------------------------------------------------------------------------------------------
# close()
# --------------------------------------------------------------------------------------------


async def test_close_runs_queued_calls_then_refuses_new_ones(
    thread, gate, block, add, fake_lib_path
):
    loop = asyncio.get_running_loop()
    first = asyncio.create_task(thread.acall(block, gate.started_w, gate.release_r))
    await loop.run_in_executor(None, gate.wait_started)
    queued = [asyncio.create_task(thread.acall(add, i, 1)) for i in range(3)]
    await asyncio.sleep(0)  # lets every task queue its call

    thread.close(timeout_s=0)  # do not wait: the first call is still blocked
    assert thread.closed
    assert not thread.stopped
    with pytest.raises(LibraryThreadClosed) as refused:
        thread.call(add, 1, 1)
    assert refused.value.vendor == VENDOR
    with pytest.raises(LibraryThreadClosed):
        await thread.acall(add, 1, 1)
    with pytest.raises(LibraryThreadClosed):
        thread.load([fake_lib_path])

    gate.release()
    assert await first == 0
    assert [await task for task in queued] == [1, 2, 3]
    await loop.run_in_executor(None, thread.close, SAFETY_S)
    assert thread.stopped


def test_close_from_the_library_thread_does_not_deadlock(thread):
    thread.call(thread.close)
    assert thread.closed
    thread.close(SAFETY_S)
    assert thread.stopped


def test_context_manager_closes_the_thread():
    with LibraryThread("ctx", default_timeout_s=SAFETY_S) as library_thread:
        assert library_thread.call(threading.current_thread).name == "xpushare-lib-ctx"
    assert library_thread.stopped
    with pytest.raises(LibraryThreadClosed, match="'ctx'"):
        library_thread.call(int)


def test_repr_says_what_the_thread_is_doing(thread):
    assert repr(thread) == f"<LibraryThread 'acme' native_id={thread.native_id} idle>"
    thread.close(SAFETY_S)
    assert repr(thread).endswith(" closed>")

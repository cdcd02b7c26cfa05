"""Waking the device plugins when kubelet's directory changes (inotify), with polling beneath.

Why: kubelet tells plugins to register again only by deleting their sockets and creating a
new ``kubelet.sock`` (research/k8s-apis.md §1.4). Polling notices that only at the next tick
(half a second by default); NVIDIA's and HAMi's plugins watch the directory and re-register
within milliseconds (research/gpustack-devices.md §4.2). One inotify descriptor on the
directory wakes every waiter on any entry created, deleted or renamed there; the plugins then
look at the sockets themselves, so an event is only ever a hint and a lost or merged one
costs nothing but the poll interval, which stays as the fallback (no inotify: another OS, a
kernel without it, the per-user watch limit reached).

The descriptor is read on the event loop (``add_reader``): no thread, and nothing to parse
beyond draining it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger(__name__)

# <sys/inotify.h>
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
WATCHED = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF

#: Bytes drained per read: many events of one burst (kubelet wiping a dozen sockets) at once.
READ_BYTES = 16 << 10


class DirectoryWatch:
    """Change notifications for one directory: :meth:`wait` returns at the next change."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.version = 0
        self.inotify = False  # whether events come from inotify (else polling only)
        self._fd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()

    def start(self) -> bool:
        """Watch the directory from the running loop; ``False`` when only polling works."""
        self._loop = asyncio.get_running_loop()
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = _inotify_fd(self.directory)
        if fd is None:
            return False
        self._fd = fd
        self._loop.add_reader(fd, self._drain)
        self.inotify = True
        return True

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self.inotify = False

    async def wait(self, seen: int, timeout_s: float) -> int:
        """Wait until :attr:`version` is past *seen* or *timeout_s* passed; the version."""
        if self.version == seen:
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await changed.wait()
        return self.version

    def _bump(self) -> None:
        self.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _drain(self) -> None:
        fd = self._fd
        if fd is None:
            return
        try:
            data = os.read(fd, READ_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:
            log.warning("inotify on %s failed, polling instead: %s", self.directory, exc)
            self.close()
            self._bump()
            return
        self._bump()
        if _gone(data):
            # The directory itself was removed or moved (a node's kubelet directory being
            # re-created): watch the new one; polling covers the moment in between.
            self.close()
            self.start()


def _gone(data: bytes) -> bool:
    # struct inotify_event: int wd; uint32 mask, cookie, len; char name[len].
    offset = 0
    while offset + 16 <= len(data):
        mask = int.from_bytes(data[offset + 4 : offset + 8], "little")
        length = int.from_bytes(data[offset + 12 : offset + 16], "little")
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            return True
        offset += 16 + length
    return False


def _inotify_fd(directory: Path) -> int | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        init = libc.inotify_init1
        add = libc.inotify_add_watch
    except (OSError, AttributeError) as exc:
        log.info("no inotify here (%s): the device-plugin directory is polled", exc)
        return None
    init.argtypes, init.restype = [ctypes.c_int], ctypes.c_int
    add.argtypes, add.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32], ctypes.c_int
    fd = int(init(IN_NONBLOCK | IN_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        log.warning("inotify_init1 failed (%s): polling %s", os.strerror(err), directory)
        return None
    if int(add(fd, os.fsencode(directory), WATCHED)) < 0:
        err = ctypes.get_errno()
        os.close(fd)
        log.warning(
            "cannot watch %s with inotify (%s; raise fs.inotify.max_user_watches if it is "
            "ENOSPC): polling it instead",
            directory,
            os.strerror(err),
        )
        return None
    return fd

"""A task group for the node agent's long-running parts, with the rules a DaemonSet needs.

Why not :class:`asyncio.TaskGroup`: the agent must be stoppable from outside (SIGTERM, a
test) before or while it starts, and it must tell "a part died" from "the agent was asked to
stop". The rules (GPUStack's, research/gpustack-devices.md §6):

* a task that **fails** cancels its siblings, and :meth:`TaskGroup.wait` raises
  :class:`TaskFailed`: the process exits and the pod restarts, instead of running on with a
  dead device plugin or a dead health loop behind a passing liveness probe;
* a task that **finishes** (returns) leaves its siblings running: e.g. a vendor without health
  checks ends its health loop, and that must not take the node's device plugins down;
* being **cancelled** is not a failure (only a stop cancels, and a stop is not an error);
* a failure **outranks** the caller's cancel: if tasks failed, :meth:`wait` reports them even
  while the caller is shutting down;
* **stop before start is kept**: :meth:`stop` is sticky, so a task spawned after it starts
  nothing (nobody would be left to cancel it);
* :meth:`stop` **waits** until every task has returned, so nothing still holds a socket or a
  library thread a successor is about to take.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

TaskFactory = Callable[[], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class TaskFailure:
    """One task that raised, with its exception (its traceback is kept)."""

    name: str
    error: BaseException


class TaskFailed(Exception):
    """One or more tasks of a group failed; each failure keeps its traceback."""

    def __init__(self, group: str, failures: list[TaskFailure]) -> None:
        self.group = group
        self.failures = list(failures)
        what = "; ".join(f"{f.name}: {type(f.error).__name__}: {f.error}" for f in failures)
        super().__init__(f"{group}: {len(failures)} task(s) failed: {what}")


class TaskGroup:
    """Named asyncio tasks that live and die together (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: dict[asyncio.Task[None], str] = {}
        self._failures: list[TaskFailure] = []
        self._stopped = False
        self._all_done = asyncio.Event()
        self._all_done.set()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called or a task failed (no new task starts)."""
        return self._stopped

    @property
    def failures(self) -> list[TaskFailure]:
        return list(self._failures)

    @property
    def running(self) -> list[str]:
        """Names of the tasks still running, for probes and logs."""
        return sorted(name for task, name in self._tasks.items() if not task.done())

    def spawn(self, name: str, factory: TaskFactory) -> bool:
        """Start ``factory()`` as a task named *name*; ``False`` (and nothing starts) once stopped.

        A factory rather than a coroutine, so a refused spawn leaves no coroutine behind that
        was never awaited.
        """
        if self._stopped:
            log.debug("%s: not starting %s: the group is stopped", self.name, name)
            return False
        task = asyncio.get_running_loop().create_task(self._guard(name, factory), name=name)
        self._tasks[task] = name
        self._all_done.clear()
        task.add_done_callback(self._forget)
        return True

    async def _guard(self, name: str, factory: TaskFactory) -> None:
        try:
            await factory()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("%s: task %s failed; stopping its siblings", self.name, name, exc_info=exc)
            self._failures.append(TaskFailure(name, exc))
            self._cancel_all()
        else:
            log.debug("%s: task %s finished", self.name, name)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        if not self._tasks:
            self._all_done.set()

    def _cancel_all(self) -> None:
        self._stopped = True
        for task in self._tasks:
            task.cancel()

    async def wait(self) -> None:
        """Wait until every task has returned; raise :class:`TaskFailed` if any failed.

        Cancelling the caller stops the group (and waits for it); failures found meanwhile
        are raised in place of the cancellation.
        """
        try:
            await self._all_done.wait()
        except asyncio.CancelledError:
            await self.stop()
            if self._failures:
                raise TaskFailed(self.name, self._failures) from None
            raise
        if self._failures:
            raise TaskFailed(self.name, self._failures)

    async def stop(self) -> None:
        """Cancel every task and wait until all have returned; sticky and idempotent.

        Must not be awaited from one of the group's own tasks (it would wait for itself).
        """
        self._cancel_all()
        # Cancellation of *this* caller while waiting must not leave tasks behind: shield
        # the wait, then re-raise.
        waiter = asyncio.ensure_future(self._all_done.wait())
        try:
            await asyncio.shield(waiter)
        except asyncio.CancelledError:
            await waiter
            raise

"""The task group's rules: failure ends siblings, finishing does not, stop is sticky."""

import asyncio

import pytest
from nodekit import running

from xpushare.node.tasks import TaskFailed, TaskGroup


async def forever() -> None:
    await asyncio.Event().wait()


async def test_a_failing_task_cancels_its_siblings_and_is_reported():
    group = TaskGroup("agent")
    cancelled = asyncio.Event()

    async def sibling() -> None:
        try:
            await forever()
        finally:
            cancelled.set()

    async def broken() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("device plugin died")

    group.spawn("sibling", sibling)
    group.spawn("broken", broken)
    with pytest.raises(TaskFailed) as info:
        await group.wait()
    assert cancelled.is_set()
    assert [f.name for f in info.value.failures] == ["broken"]
    assert "device plugin died" in str(info.value)
    assert info.value.failures[0].error.__traceback__ is not None


async def test_a_finished_task_leaves_its_siblings_running():
    group = TaskGroup("agent")
    group.spawn("health", lambda: asyncio.sleep(0))
    group.spawn("plugin", forever)
    for _ in range(5):
        await asyncio.sleep(0)
    assert group.running == ["plugin"]
    assert not group.stopped
    await group.stop()
    await group.wait()  # a stop is not a failure: no exception


async def test_stop_before_start_is_kept():
    group = TaskGroup("agent")
    await group.stop()
    started = []

    async def task() -> None:
        started.append(1)

    assert group.spawn("late", task) is False
    await asyncio.sleep(0)
    assert started == []
    await group.wait()


async def test_stop_waits_for_every_task_to_return():
    group = TaskGroup("agent")
    released = []

    async def holds_a_socket() -> None:
        try:
            await forever()
        finally:
            await asyncio.sleep(0.01)  # cleanup that takes a moment
            released.append("socket")

    group.spawn("plugin", holds_a_socket)
    await asyncio.sleep(0)
    await group.stop()
    assert released == ["socket"]


async def test_failure_outranks_the_callers_cancel():
    group = TaskGroup("agent")

    async def fails_on_cancel() -> None:
        try:
            await forever()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    group.spawn("plugin", fails_on_cancel)
    waiter = asyncio.create_task(group.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(TaskFailed, match="cleanup failed"):
        await waiter


async def test_the_agent_stops_at_once_when_a_wake_up_lands_with_the_stop(plugin_dir):
    # On Python 3.11, asyncio.wait_for returns the inner result when the cancellation arrives
    # as the inner wait completes: a loop waiting on an event that is set in the same tick as
    # the stop kept running, and the agent's stop waited for its next timeout (CI: a node
    # agent that took minutes to stop after a pod deletion woke its release pass).
    async with running(plugin_dir) as run:
        agent = run.agent
        for _ in range(20):
            await asyncio.sleep(0)
        agent.releases.poke()
        agent.publisher.poke()
        agent.rescan()
        stopping = asyncio.ensure_future(agent.stop())
        done, _ = await asyncio.wait({stopping}, timeout=5.0)
        assert done, f"the agent is still running {agent.group.running} 5 s after stop()"
        assert agent.group.running == []

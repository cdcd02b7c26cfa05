"""Fixtures of the scheduler tests: a fake API server, a running scheduler, an HTTP client.

Everything is real except the API server: the official ``kubernetes`` client talks HTTP to
:class:`xpushare.testing.apiserver.FakeApiServer`, and the tests talk HTTP to the scheduler
with kube-scheduler-shaped and apiserver-shaped JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from sched_helpers import Running, start_scheduler

from xpushare.testing.apiserver import FakeApiServer


@pytest.fixture
async def api() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def scheduler_factory(
    api: FakeApiServer,
) -> AsyncIterator[Callable[..., Any]]:
    started: list[Running] = []

    async def make(**overrides: Any) -> Running:
        running = await start_scheduler(api, **overrides)
        started.append(running)
        return running

    yield make
    for running in started:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running.close(), 10)


@pytest.fixture
async def sched(scheduler_factory: Callable[..., Any]) -> Running:
    running: Running = await scheduler_factory()
    return running

"""The throughput paths of session 10 (issue 13): the collector frozen only once every list
is in, /prioritize's answer encoded without a dict per node, and lazy connection deadlines.
Each test fails on the code before: the freeze ran after the pods' list even when the
nodes' came later; the answer was a list of dicts; every arm made a timer."""

from __future__ import annotations

import asyncio
import sys
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from sched_helpers import mock_host

from xpushare.scheduler import app as app_module
from xpushare.scheduler.app import Scheduler
from xpushare.scheduler.config import load_config
from xpushare.scheduler.connections import Deadline
from xpushare.scheduler.extender import MAX_EXTENDER_SCORE, from_lowest, score_list
from xpushare.scheduler.kube import Kube, KubeSettings
from xpushare.scheduler.preload import DECISION_MODULES
from xpushare.testing.apiserver import FakeApiServer, node


async def test_the_collector_is_frozen_once_after_the_last_list_whichever_lands_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, bool]] = []
    api = FakeApiServer()
    await api.start()
    kube = await Kube.connect(KubeSettings(server=api.url))
    try:
        scheduler = Scheduler(
            load_config(environ={}, overrides={"leader.enabled": False}),
            host=mock_host(),
            kube=kube,
            freeze_gc=True,
        )
        fake_gc = SimpleNamespace(
            collect=lambda: calls.append(("collect", scheduler.cluster.nodes_synced)),
            freeze=lambda: calls.append(("freeze", scheduler.cluster.nodes_synced)),
        )
        monkeypatch.setattr(app_module, "gc", fake_gc)
        # The pods' list first (the usual order: it is the smaller), then the quotas'...
        scheduler._replace_pods([])
        scheduler._replace_quotas([])
        assert calls == []  # not yet: the nodes' objects would stay in the collector's reach
        scheduler._replace_nodes([node("node-0"), node("node-1")])
        assert calls == [("collect", True), ("freeze", True)]
        # ...and a relist later does not freeze again (the first sync's objects are frozen).
        scheduler._replace_nodes([node("node-0")])
        scheduler._replace_pods([])
        assert len(calls) == 2
    finally:
        await kube.close()
        await api.stop()


@pytest.mark.parametrize(
    "names",
    [
        ["node-0", "node-1", "node-0", "gpu-7.rack-2.example.com"],
        ['quote"and\\back', "ünïcödé-ノード", "tab\tand\nnewline", "", "del\x7f"],
        [],
    ],
)
def test_the_score_list_holds_exactly_the_dicts_it_replaces(names: list[str]) -> None:
    scores = [i % (MAX_EXTENDER_SCORE + 1) for i in range(len(names))]
    entries = orjson.loads(orjson.dumps(score_list(names, scores)))
    # The same entries, duplicates included (kube-scheduler sums them by host; the order
    # is not read).
    key = lambda e: (e["Host"], e["Score"])  # noqa: E731
    expected = [{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True) if s]
    assert sorted(entries, key=key) == sorted(expected, key=key)


def test_the_score_list_groups_plain_names_by_score() -> None:
    names = [f"node-{i:05d}" for i in range(500)]
    scores = [(i * 7) % 3 * 5 for i in range(500)]
    encoded = orjson.dumps(score_list(names, scores))
    entries = orjson.loads(encoded)
    nonzero = {n: s for n, s in zip(names, scores, strict=True) if s}
    assert len(entries) == len(nonzero) < 500  # 0 is left out: kube-scheduler reads it so
    assert {e["Host"]: e["Score"] for e in entries} == nonzero
    runs = sum(1 for a, b in pairwise(entries) if a["Score"] != b["Score"])
    assert runs == 1  # two scores above 0, two groups


@pytest.mark.parametrize(
    ("scores", "expected"),
    [([3, 5, 3, 10], [0, 2, 0, 7]), ([0, 4], [0, 4]), ([7], [0]), ([], [])],
)
def test_scores_are_taken_from_the_lowest(scores: list[int], expected: list[int]) -> None:
    # The same amount off every candidate: kube-scheduler's pick and its ties stay the same.
    assert from_lowest(scores) == expected


async def test_a_deadline_moved_later_keeps_its_timer_and_fires_once_at_the_new_time() -> None:
    loop = asyncio.get_running_loop()
    fired: list[float] = []
    made: list[Any] = []
    real_call_at = loop.call_at

    def counting_call_at(
        when: float, callback: Any, *args: Any, **kwargs: Any
    ) -> asyncio.TimerHandle:
        if getattr(callback, "__self__", None) is deadline:
            made.append(when)
        return real_call_at(when, callback, *args, **kwargs)

    loop.call_at = counting_call_at  # type: ignore[method-assign]
    try:
        deadline = Deadline(lambda: fired.append(loop.time()))
        start = loop.time()
        deadline.arm(0.05)
        for _ in range(100):  # a busy kept-alive connection: arms, pauses, arms again
            deadline.cancel()
            deadline.arm(0.15)
        assert len(made) == 1  # no timer per arm
        await asyncio.sleep(0.1)
        assert fired == []  # the first timer found the deadline moved and set itself again
        await asyncio.sleep(0.15)
        assert len(fired) == 1 and fired[0] - start >= 0.15
        assert len(made) == 2
        # Earlier than the timer set: a new timer, the old one cancelled.
        deadline.arm(10)
        deadline.arm(0.02)
        await asyncio.sleep(0.08)
        assert len(fired) == 2
        # Paused: the timer fires and finds nothing due.
        deadline.arm(0.02)
        deadline.cancel()
        await asyncio.sleep(0.08)
        assert len(fired) == 2
    finally:
        loop.call_at = real_call_at  # type: ignore[method-assign]


async def test_a_stopped_deadline_leaves_no_timer_behind() -> None:
    fired: list[bool] = []
    deadline = Deadline(lambda: fired.append(True))
    deadline.arm(0.02)
    timer = deadline._timer
    assert timer is not None
    deadline.stop()
    assert timer.cancelled() and deadline._timer is None
    await asyncio.sleep(0.05)
    assert fired == []


async def test_a_scheduler_imports_its_decision_modules_at_start(api, scheduler_factory) -> None:
    # The first /filter no longer imports numpy on the loop (scheduler/preload.py).
    sched = await scheduler_factory()
    tasks = {task.get_name(): task for task in sched.scheduler._tasks}
    await asyncio.wait_for(tasks["preload"], 30)
    assert {"numpy", *DECISION_MODULES} <= set(sys.modules)

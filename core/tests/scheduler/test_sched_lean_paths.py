"""The throughput paths of session 10 (issue 13): the collector frozen only once every list
is in, /prioritize's answer encoded without a dict per node, and lazy connection deadlines.
Each test fails on the code before: the freeze ran after the pods' list even when the
nodes' came later; the answer was a list of dicts; every arm made a timer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from sched_helpers import mock_host

from xpushare.scheduler import app as app_module
from xpushare.scheduler.app import Scheduler
from xpushare.scheduler.config import load_config
from xpushare.scheduler.connections import Deadline
from xpushare.scheduler.extender import MAX_EXTENDER_SCORE, ScoreList
from xpushare.scheduler.kube import Kube, KubeSettings
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
        ["node-0", "node-1", "node-0"],
        ['quote"and\\back', "ünïcödé-ノード", "tab\tand\nnewline", ""],
        [],
    ],
)
def test_the_score_list_is_the_json_of_the_dicts_it_replaces(names: list[str]) -> None:
    scores = [i % (MAX_EXTENDER_SCORE + 1) for i in range(len(names))]
    encoded = orjson.dumps(ScoreList().encode(names, scores))
    dicts = [{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)]
    assert encoded == orjson.dumps(dicts)


def test_the_score_list_keeps_at_most_its_limit_of_names() -> None:
    answers = ScoreList(limit=8)
    for batch in range(5):
        names = [f"made-up-{batch}-{i}" for i in range(7)]
        encoded = orjson.dumps(answers.encode(names, [MAX_EXTENDER_SCORE] * 7))
        assert orjson.loads(encoded) == [{"Host": n, "Score": MAX_EXTENDER_SCORE} for n in names]
        assert len(answers) <= 8


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

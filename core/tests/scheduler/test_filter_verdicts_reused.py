"""/filter's verdicts read once for the /prioritize that follows (issue 13, session 11).

/filter asks the placer's verdicts when nearly all are remembered, and /prioritize reads the
ones of the nodes that fit back, asking again only the nodes the ledger changed in between
(``UsageLedger.changed_since``). Each test fails on a shortcut that would give another
answer than a fresh read: a change in between not asked again, a log that forgets a removal,
a /filter answer that differs from the feasibility check's.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest
from fleets import fleet, gpus, share, whole

from xpushare.placement import NoFit, Placer
from xpushare.placement.verdicts import WARM_FILL
from xpushare.scheduler.feasible import FeasibilityChecker
from xpushare.scheduling import PodRequest, UsageLedger, Workload
from xpushare.scheduling.ledger import CHANGE_LOG


def test_the_ledger_names_the_nodes_changed_since_a_clock_reading() -> None:
    ledger = UsageLedger()
    ledger.set_node("a", gpus("a", 2))
    ledger.set_node("b", gpus("b", 2))
    start = ledger.clock
    assert ledger.changed_since(start) == set()
    placer = Placer(ledger, "binpack")
    placer.commit("p", share(30), placer.decide(share(30), "a"))
    assert ledger.changed_since(start) == {"a"}
    ledger.set_node("c", gpus("c", 1))  # added
    ledger.remove_node("b")  # removed, with no pod: the state is gone, the change is not
    assert ledger.changed_since(start) == {"a", "b", "c"}
    later = ledger.clock
    ledger.remove("p")
    assert ledger.changed_since(later) == {"a"}
    # More changes than the log keeps: the reader must ask everything again.
    for _ in range(CHANGE_LOG):
        ledger.set_node("c", gpus("c", 1))
    assert ledger.changed_since(later) is None
    assert ledger.changed_since(ledger.clock - 1) == {"c"}


def _requests(rng: random.Random, count: int) -> list[PodRequest]:
    return [
        share(rng.choice((10, 30, 50, 70)), cpu=rng.choice((0, 2000, 8000)))
        if rng.random() < 0.7
        else whole(rng.choice((1, 2)))
        for _ in range(count)
    ]


# 300 nodes: past COLUMN_FROM, so /filter's verdicts come from the verdict cache's columns.
@pytest.mark.parametrize("size", [40, 300])
@pytest.mark.parametrize("policy", ["binpack", "fgd", "fgd-cpu"])
def test_prioritize_after_filter_answers_as_a_fresh_read_whatever_changed_between(
    policy: str, size: int
) -> None:
    rng = random.Random(11)
    ledger = fleet(rng, size)
    pods = _requests(rng, 60)
    placer = Placer(ledger, policy)
    placer.policy.set_workload(Workload.from_requests(pods))
    names = [*ledger.nodes, "ghost"]
    recalled = 0
    for i, request in enumerate(pods):
        placer.scores(request, names)  # remembered, as after the shape's first pods
        verdicts = placer.warm_verdicts(request, names)
        assert verdicts is not None
        fits = [n for n, v in zip(names, verdicts, strict=True) if v[0]]
        # Between /filter and /prioritize: other pods land on some of these nodes, a node
        # leaves and comes back with other devices.
        for j, name in enumerate(rng.sample(fits, min(3, len(fits)))):
            other = share(rng.choice((20, 40)))
            with contextlib.suppress(NoFit):  # a node the other pod does not fit: no change
                placer.commit(f"other-{i}-{j}", other, placer.decide(other, name))
        if i % 7 == 0 and fits:
            gone = rng.choice(fits)
            state = ledger.node(gone)
            if state is not None and not state.pods:
                ledger.remove_node(gone)
                ledger.set_node(gone, gpus(gone, 8))
        recalled += placer.cache.recall(request, fits) is not None
        each = placer.prioritize_each(request, fits)
        ranked = placer.prioritize_array(request, fits).tolist()
        placer.cache.remembered = None  # the same question, read afresh
        placer.cache.columns.clear()
        assert each == placer.prioritize_each(request, fits), (i, request.describe())
        assert ranked == [-1.0 if s is None else s for s in each]
        best = max(
            (n for n, s in zip(fits, each, strict=True) if s is not None),
            key=lambda n: each[fits.index(n)] or 0.0,
            default=None,
        )
        if best is not None:
            placer.commit(f"p{i}", request, placer.decide(request, best))
    assert recalled == len(pods), "every /prioritize read /filter's verdicts back"


def test_a_prioritize_of_other_nodes_or_another_pod_shape_reads_afresh() -> None:
    ledger = fleet(random.Random(3), 10)
    placer = Placer(ledger, "binpack")
    names = list(ledger.nodes)
    placer.scores(share(30), names)
    assert placer.warm_verdicts(share(30), names) is not None
    assert placer.cache.recall(share(30), names) is not None
    assert placer.cache.recall(share(30), names[1:]) is None
    assert placer.cache.recall(share(50), names) is None


def test_filter_answers_by_feasibility_where_most_verdicts_are_not_known_yet() -> None:
    ledger = UsageLedger()
    for n in range(WARM_FILL + 8):  # each node in a state of its own (its free CPU)
        ledger.set_node(f"n{n}", gpus(f"n{n}", 2), cpu_milli=4000 + n)
    placer = Placer(ledger, "fgd")
    names = list(ledger.nodes)
    reads: list[int] = []
    read = placer.cache.read
    placer.cache.read = lambda states, *a: (reads.append(len(states)), read(states, *a))[1]  # type: ignore[method-assign]
    # A new shape: every node to score, and not a memo read first.
    assert placer.warm_verdicts(share(30), names) is None
    assert placer.cache.remembered is None and reads == []
    placer.scores(share(30), names[:5])  # a shape asked before, but of 5 nodes only
    assert placer.warm_verdicts(share(30), names) is None
    placer.scores(share(30), names)
    assert placer.warm_verdicts(share(30), names) is not None


@pytest.mark.parametrize("size", [50, 300])
@pytest.mark.parametrize("policy", ["binpack", "fgd-cpu"])
def test_filter_from_the_verdicts_is_the_feasibility_checks_answer(policy: str, size: int) -> None:
    rng = random.Random(7)
    ledger = fleet(rng, size)
    placer = Placer(ledger, policy)
    pods = _requests(rng, 40)
    placer.policy.set_workload(Workload.from_requests(pods))
    checker = FeasibilityChecker(placer)
    names = [*ledger.nodes, "ghost"]
    warm = 0
    for i, request in enumerate(pods):
        placer.scores(request, names)
        scored = checker.check(request, names, scored=True)
        warm += placer.cache.remembered is not None
        plain = checker.check(request, names)
        seen: Any = (scored.fits, scored.failed, scored.reasons)
        assert seen == (plain.fits, plain.failed, plain.reasons), request.describe()
        if scored.fits:
            node = rng.choice(scored.fits)
            placer.commit(f"p{i}", request, placer.decide(request, node))
    assert warm == len(pods)

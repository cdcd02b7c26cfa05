"""The verdict cache's contract, on its own (placement/verdicts.py's docstring).

Each test states one clause: the verdicts are what a fresh fit and a fresh score of each
node alone give; nodes in one state share one answer, worked out once; a node that changed,
or a new workload generation, is worked out again; unknown nodes; the best nodes; /filter's
verdicts recalled for the /prioritize after. A cache that kept a stale answer, shared one
between nodes that differ, or skipped a node fails one of them.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from fleets import fleet, gpus, share, use, whole

from xpushare.models import ContainerAssignment, FitReason, PodAssignment
from xpushare.placement.results import LOWEST, UNKNOWN_NODE, score_key
from xpushare.placement.variants import policy_registry
from xpushare.placement.vendorfit import VendorFits
from xpushare.placement.verdicts import (
    COLUMN_FROM,
    MAX_COLUMNS,
    WARM_FILL,
    TooCold,
    VerdictCache,
)
from xpushare.scheduling import PodRequest, Policy, UsageLedger, Workload, fit_pod
from xpushare.scheduling.fit import slices
from xpushare.scheduling.ledger import CHANGE_LOG


def policy_on(ledger: UsageLedger, name: str, workload: list[PodRequest]) -> Policy:
    policy = policy_registry().create(name, {})
    policy.attach(ledger)
    policy.set_workload(Workload.from_requests(workload))
    return policy


def cache_on(ledger: UsageLedger, policy: Policy) -> VerdictCache:
    vendors = VendorFits(ledger, None, score_weight=0.0, topology=False)
    return VerdictCache(ledger, policy, vendors, topology=False)


def plain(verdict: Any) -> tuple[Any, ...]:
    """A verdict without its refusal's details: fits and score, or the main reason."""
    return (True, verdict[1]) if verdict[0] else (False, verdict[2])


REQUESTS = [share(10), share(30, cpu=2000), share(70, cpu=8000), whole(1), whole(2), whole(4)]


@pytest.mark.parametrize("name", ["binpack", "best-fit", "fgd", "fgd-cpu"])
def test_each_verdict_is_a_fresh_fit_and_score_of_that_node_alone(name: str) -> None:
    ledger = fleet(random.Random(1), 60, used=0.4)
    cache = cache_on(ledger, policy_on(ledger, name, REQUESTS))
    # The reference: another policy of the same name, asked about one node at a time.
    fresh = policy_on(ledger, name, REQUESTS)
    for request in REQUESTS:
        names, verdicts = cache.verdicts(request, None)
        assert names == list(ledger.nodes)
        for node, verdict in zip(names, verdicts, strict=True):
            state = ledger.nodes[node]
            fit = fit_pod(state, request)
            assert verdict[0] == fit.fits, (node, request.describe())
            if fit.fits:
                value = fresh.score_many([state], request)[0]
                assert verdict[1] == score_key(value), (node, request.describe())
            else:
                assert verdict[2] is not None


def test_nodes_in_one_state_share_one_answer_worked_out_once() -> None:
    ledger = UsageLedger()
    for n in range(20):
        ledger.set_node(f"n{n}", gpus(f"n{n}", 2))
    cache = cache_on(ledger, policy_on(ledger, "fgd", REQUESTS))
    worked: list[int] = []
    answer = cache.filler.answer

    def counted(request: PodRequest, key: int, nodes: Any, **how: Any) -> None:
        worked.append(len(nodes))
        answer(request, key, nodes, **how)

    cache.filler.answer = counted  # type: ignore[method-assign]
    _, verdicts = cache.verdicts(share(30), None)
    assert worked == [1], "twenty nodes in one state: one worked out"
    assert len({id(v) for v in verdicts}) == 1, "and one verdict, shared"


def test_a_node_that_changed_is_worked_out_again_and_no_other() -> None:
    ledger = fleet(random.Random(2), 30, used=0.4)
    cache = cache_on(ledger, policy_on(ledger, "binpack", REQUESTS))
    request = whole(2)
    names, before = cache.verdicts(request, None)
    target = next(n for n, v in zip(names, before, strict=True) if v[0])
    filled: list[list[str]] = []
    fill = cache.filler.fill

    def counted(request: PodRequest, key: int, nodes: Any) -> None:
        filled.append([n.name for n in nodes])
        fill(request, key, nodes)

    cache.filler.fill = counted  # type: ignore[method-assign]
    state = ledger.nodes[target]
    taken = tuple(d.id for d in state.tables["mock"].devices)
    ledger.add(
        "hog",
        PodAssignment(
            node=target,
            containers=tuple(
                ContainerAssignment(
                    container=f"c{i}",
                    vendor="mock",
                    devices=slices([(d, 1000, 100, True, None)]),
                )
                for i, d in enumerate(state.tables["mock"].devices)
                if d.id in taken
            ),
        ),
    )
    _, after = cache.verdicts(request, None)
    assert filled == [[target]], "only the node that changed is asked again"
    assert not after[names.index(target)][0], "and its new state does not fit two GPUs"
    assert [v for n, v in zip(names, after, strict=True) if n != target] == [
        v for n, v in zip(names, before, strict=True) if n != target
    ]


def test_a_new_workload_generation_gives_new_answers() -> None:
    ledger = fleet(random.Random(3), 20, used=0.4)
    policy = policy_on(ledger, "fgd", [share(10)])
    cache = cache_on(ledger, policy)
    first = cache.key(share(30))
    policy.set_workload(Workload.from_requests([whole(4)]))
    second = cache.key(share(30))
    assert first != second
    _, verdicts = cache.verdicts(share(30), None)
    fresh = cache_on(ledger, policy).verdicts(share(30), None)[1]
    assert list(map(plain, verdicts)) == list(map(plain, fresh))


def test_a_node_the_ledger_does_not_know() -> None:
    ledger = fleet(random.Random(4), 5, used=0.4)
    cache = cache_on(ledger, policy_on(ledger, "binpack", REQUESTS))
    names, verdicts = cache.verdicts(share(30), ["ghost", "n0"])
    assert names == ["ghost", "n0"]
    assert verdicts[0] == (False, UNKNOWN_NODE, FitReason.NO_DEVICES)
    nothing = PodRequest.build([], cpu_milli=100)
    assert cache.verdicts(nothing, ["ghost"])[1] == [(True, LOWEST, None)]


@pytest.mark.parametrize("name", ["binpack", "fgd-cpu"])
def test_top_is_every_best_node_in_the_ledgers_order(name: str) -> None:
    ledger = fleet(random.Random(5), 40, used=0.4)
    cache = cache_on(ledger, policy_on(ledger, name, REQUESTS))
    for request in REQUESTS:
        names, verdicts = cache_on(ledger, policy_on(ledger, name, REQUESTS)).verdicts(
            request, None
        )
        best = max((v[1] for v in verdicts if v[0]), default=None)
        want = [n for n, v in zip(names, verdicts, strict=True) if v[0] and v[1] == best]
        assert [s.name for s in cache.top(request)] == want, request.describe()


def test_filters_verdicts_are_recalled_and_changes_asked_again() -> None:
    ledger = UsageLedger()
    for n in range(WARM_FILL + 8):  # each node in a state of its own (its free CPU)
        ledger.set_node(f"n{n}", gpus(f"n{n}", 2), cpu_milli=4000 + n)
    cache = cache_on(ledger, policy_on(ledger, "binpack", REQUESTS))
    names = list(ledger.nodes)
    request = share(30)
    # A shape never asked: nothing to warm (the caller answers feasibility its own way).
    assert cache.warm_verdicts(request, names) is None
    with pytest.raises(TooCold):
        cache.verdicts(request, names, limit=WARM_FILL)
    cache.verdicts(request, names)
    verdicts = cache.warm_verdicts(request, names)
    assert verdicts is not None
    fits = [n for n, v in zip(names, verdicts, strict=True) if v[0]]
    assert cache.recall(request, fits) == [v for v in verdicts if v[0]]
    assert cache.recall(request, fits[1:]) is None, "other nodes: read afresh"
    assert cache.recall(share(50), fits) is None, "another shape: read afresh"
    use(ledger, "p", fits[0], 100)
    use(ledger, "q", fits[0], 100)
    recalled = cache.recall(request, fits)
    assert recalled is not None
    fresh = cache_on(ledger, policy_on(ledger, "binpack", REQUESTS)).verdicts(request, fits)[1]
    assert list(map(plain, recalled)) == list(map(plain, fresh))
    assert not recalled[0][0], "the node filled in between no longer fits"


# -- columns: a long list of names read in one pass (COLUMN_FROM and more) ----------------------


def column_fleet(seed: int) -> UsageLedger:
    return fleet(random.Random(seed), COLUMN_FROM + 40, used=0.4)


@pytest.mark.parametrize(("name", "seed"), [("binpack", 10), ("fgd", 11), ("fgd-cpu", 12)])
def test_a_column_answers_as_a_fresh_read_whatever_changed_between(name: str, seed: int) -> None:
    """Changes between two reads of one shape (pods placed and removed, nodes added, removed
    and re-inventoried, names kube-scheduler sends that the ledger does not know), each
    read in another order: every verdict the column gives is a fresh cache's."""
    rng = random.Random(seed)
    ledger = column_fleet(seed)
    cache = cache_on(ledger, policy_on(ledger, name, REQUESTS))
    placed: list[str] = []
    for step in range(40):
        names = list(ledger.nodes) + ["ghost-a", "ghost-b"][: step % 3]
        rng.shuffle(names)
        for request in (share(30), whole(2)):
            got = cache.verdicts(request, names)
            fresh = cache_on(ledger, cache.filler.policy).verdicts(request, names)
            assert got[0] == fresh[0]
            assert list(map(plain, got[1])) == list(map(plain, fresh[1])), (step, request)
        change = rng.random()
        node = rng.choice(list(ledger.nodes))
        if change < 0.5:
            key = f"p{step}"
            use(ledger, key, node, rng.choice((10, 50, 100)))
            placed.append(key)
        elif change < 0.65 and placed:
            ledger.remove(placed.pop(rng.randrange(len(placed))))
        elif change < 0.75:
            ledger.set_node(f"new{step}", gpus(f"new{step}", 2))
        elif change < 0.85 and not ledger.nodes[node].pods:
            ledger.remove_node(node)
        else:
            ledger.set_node(node, gpus(node, rng.choice((1, 4))))
    assert cache.columns, "the long reads went through a column"


def test_a_column_keeps_only_nodes_the_ledger_knows_and_a_bounded_number() -> None:
    ledger = column_fleet(13)
    cache = cache_on(ledger, policy_on(ledger, "binpack", REQUESTS))
    names = [*ledger.nodes, *(f"made-up-{i}" for i in range(500))]
    cache.verdicts(share(30), names)
    assert not cache.columns, "a shape met for the first time keeps no column"
    cache.verdicts(share(30), names)
    (column,) = cache.columns.values()
    assert set(column.by_name) == set(ledger.nodes)
    for percent in range(1, MAX_COLUMNS + 5):
        cache.verdicts(share(percent), names)
        assert len(cache.columns) <= MAX_COLUMNS, "a shape read once keeps no column"
        cache.verdicts(share(percent), names)
    assert len(cache.columns) == MAX_COLUMNS


def test_a_column_reads_no_node_but_those_changed() -> None:
    """The point of a column: a second read of the same names asks no node's memo, and after
    one node changed, that node only (each through the ledger's change log)."""
    ledger = column_fleet(14)
    cache = cache_on(ledger, policy_on(ledger, "binpack", REQUESTS))
    names = list(ledger.nodes)
    request = share(30)
    cache.verdicts(request, names)
    asked: list[str] = []
    read_one = cache._read_one

    def counted(node: Any, key: int) -> Any:
        asked.append(node.name)
        return read_one(node, key)

    cache._read_one = counted  # type: ignore[method-assign]
    before = cache.verdicts(request, list(reversed(names)))[1]
    assert asked == []
    target = next(n for n, v in zip(reversed(names), before, strict=True) if v[0])
    use(ledger, "p", target, 10)
    assert ledger.changed_since(ledger.clock - 1) == {target}
    after = cache.verdicts(request, names)[1]
    assert set(asked) == {target}
    fresh = cache_on(ledger, cache.filler.policy).verdicts(request, names)[1]
    assert list(map(plain, after)) == list(map(plain, fresh))


def test_a_column_past_the_limit_or_the_log_is_read_node_by_node() -> None:
    ledger = column_fleet(15)
    cache = cache_on(ledger, policy_on(ledger, "binpack", REQUESTS))
    names = list(ledger.nodes)
    request = share(30)
    cache.verdicts(request, names)
    for node in names[: WARM_FILL + 1]:
        ledger.set_node(node, gpus(node, 4))
    with pytest.raises(TooCold):
        cache.verdicts(request, names, limit=WARM_FILL)
    assert not cache.columns, "more changed than the caller waits for: the column goes"
    cache.verdicts(request, names)
    for _ in range(CHANGE_LOG + 1):
        ledger.set_node(names[0], gpus(names[0], 2))
    got = cache.verdicts(request, names)[1]
    fresh = cache_on(ledger, cache.filler.policy).verdicts(request, names)[1]
    assert list(map(plain, got)) == list(map(plain, fresh))

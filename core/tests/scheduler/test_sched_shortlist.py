"""/filter's shortlist (scheduler/shortlist.py): the policy's best few of the nodes that fit,
all of them for a pod with soft preferences of its own, every refusal when none fits."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import numpy
import pytest
from sched_helpers import add_nodes, bind_args, create_pod, filter_args, gpu_pod

from xpushare.scheduler import ConfigError, load_config
from xpushare.scheduler.shortlist import DEFAULT_SHORTLIST, shortlist, states_preferences
from xpushare.testing.apiserver import node

if TYPE_CHECKING:
    from xpushare.placement.ranking import FloatArray


def ranks(*scores: float | None) -> FloatArray:
    """Scores as Placer.prioritize_array gives them: -1 for a node that does not fit."""
    return numpy.array([-1.0 if s is None else s for s in scores], dtype=numpy.float64)


# -- the selection ---------------------------------------------------------------------------------


def test_keeps_the_best_in_the_order_given():
    names = ["a", "b", "c", "d", "e"]
    assert shortlist(names, ranks(1.0, 5.0, 3.0, 5.0, 0.0), set(), 3) == ["b", "c", "d"]


def test_ties_keep_the_order_given():
    names = [f"n{i}" for i in range(10)]
    assert shortlist(names, ranks(*[7.0] * 10), set(), 4) == ["n0", "n1", "n2", "n3"]


def test_a_busy_node_and_an_unscored_one_rank_below_every_scored_node():
    names = ["busy", "none", "low", "mid"]
    assert shortlist(names, ranks(10.0, None, 0.0, 4.0), {"busy"}, 2) == ["low", "mid"]
    # Kept when nothing better is left, a busy node last of all.
    assert shortlist(names, ranks(10.0, None, 0.0, 4.0), {"busy"}, 3) == ["none", "low", "mid"]
    assert shortlist(names, ranks(10.0, None, 0.0, 4.0), {"busy"}, 4) is names
    assert shortlist([*names, "x"], ranks(10.0, None, 0.0, 4.0, 1.0), {"busy"}, 4) == [
        "none",
        "low",
        "mid",
        "x",
    ]
    assert shortlist(names, ranks(10.0, 9.0, 0.0, 4.0), {"busy", "none"}, 3) == [
        "busy",
        "low",
        "mid",
    ]


@pytest.mark.parametrize("seed", range(20))
def test_the_same_as_a_plain_sort(seed):
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(rng.randint(1, 60))]
    scores = [rng.choice([None, *range(5)]) for _ in names]
    busy = {n for n in names if rng.random() < 0.2}
    keep = rng.randint(1, 20)

    def rank(i: int) -> tuple[int, float, int]:
        score = scores[i]
        return (names[i] in busy, -(-1.0 if score is None else score), i)

    expected = sorted(sorted(range(len(names)), key=rank)[:keep])
    assert shortlist(names, ranks(*scores), busy, keep) == [names[i] for i in expected]


def test_zero_or_a_short_list_passes_every_node():
    names = ["a", "b", "c"]
    assert shortlist(names, ranks(1.0, 2.0, 3.0), set(), 0) is names
    assert shortlist(names, ranks(1.0, 2.0, 3.0), set(), 3) is names


@pytest.mark.parametrize(
    "spec",
    [
        {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{}]}}},
        {"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{}]}}},
        {
            "affinity": {
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{}]}
            }
        },
        {"topologySpreadConstraints": [{"whenUnsatisfiable": "ScheduleAnyway", "maxSkew": 1}]},
    ],
)
def test_soft_preferences_are_seen(spec):
    assert states_preferences({"spec": spec})


@pytest.mark.parametrize(
    "sent",
    [
        None,
        [],
        "pod",
        {"spec": None},
        {"spec": []},
        {"spec": {"affinity": "x"}},
        {"spec": {"affinity": {"nodeAffinity": []}}},
        # Hard rules are kube-scheduler's filter, applied before it asks us: no preference.
        {
            "spec": {
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}},
                    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
                },
                "topologySpreadConstraints": [
                    {"whenUnsatisfiable": "DoNotSchedule"},
                    "junk",
                    None,
                ],
            }
        },
        {"spec": {"topologySpreadConstraints": {"whenUnsatisfiable": "ScheduleAnyway"}}},
    ],
)
def test_no_preference_or_a_shape_no_pod_has(sent):
    assert not states_preferences(sent)


# -- the setting -----------------------------------------------------------------------------------


def test_the_setting_defaults_and_is_bounded():
    assert load_config(environ={}).extender.shortlist == DEFAULT_SHORTLIST
    assert load_config(environ={}, overrides={"extender.shortlist": 0}).extender.shortlist == 0
    env = {"XPUSHARE_SCHEDULER__EXTENDER__SHORTLIST": "5"}
    assert load_config(environ=env).extender.shortlist == 5
    with pytest.raises(ConfigError, match=r"extender\.shortlist"):
        load_config(environ={}, overrides={"extender.shortlist": -1})


# -- through /filter -------------------------------------------------------------------------------


async def _fleet(api, sched, http, count: int) -> list[str]:
    """*count* nodes, every third one partly used, so binpack ranks those first."""
    names = add_nodes(api, count)
    await sched.settle(api)
    for i in range(0, count, 3):
        used = create_pod(api, gpu_pod(f"used-{i}", gpu="1", mem="20000"))
        assert (await sched.post(http, "bind", bind_args(used, names[i]))) == {"Error": ""}
        await sched.settle(api)
    return names


async def test_filter_passes_on_the_policys_best(api, scheduler_factory, http):
    sched = await scheduler_factory(**{"placement.policy": "binpack", "extender.shortlist": 4})
    names = await _fleet(api, sched, http, 12)
    want = create_pod(api, gpu_pod("want", gpu="1", mem="10000"))
    result = await sched.post(http, "filter", filter_args(want, names))
    # The four partly used nodes, in kube-scheduler's order; the others fit and are left out.
    assert result["NodeNames"] == ["node-0", "node-3", "node-6", "node-9"]
    assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}
    # /prioritize then ranks the shortlist as it would have ranked them among all.
    scores = await sched.post(http, "prioritize", filter_args(want, result["NodeNames"]))
    assert {s["Host"] for s in scores} <= set(result["NodeNames"])
    metrics = sched.scheduler.metrics.shortlists
    assert metrics.labels(result="shortened")._value.get() == 1


async def test_a_busy_node_leaves_the_shortlist_while_its_bind_is_in_flight(
    api, scheduler_factory, http
):
    sched = await scheduler_factory(**{"placement.policy": "binpack", "extender.shortlist": 4})
    names = await _fleet(api, sched, http, 12)
    want = create_pod(api, gpu_pod("want", gpu="1", mem="10000"))
    sched.scheduler.extender.binding.started("node-3")
    result = await sched.post(http, "filter", filter_args(want, names))
    # The other three partly used nodes, and the first of the equal empty ones.
    assert result["NodeNames"] == ["node-0", "node-1", "node-6", "node-9"]


async def test_a_pod_with_soft_preferences_gets_every_node_that_fits(api, scheduler_factory, http):
    sched = await scheduler_factory(**{"placement.policy": "binpack", "extender.shortlist": 4})
    names = await _fleet(api, sched, http, 12)
    want = gpu_pod("want", gpu="1", mem="10000")
    want["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "x"}},
        }
    ]
    want = create_pod(api, want)
    result = await sched.post(http, "filter", filter_args(want, names))
    assert result["NodeNames"] == names
    metrics = sched.scheduler.metrics.shortlists
    assert metrics.labels(result="preferences")._value.get() == 1


async def test_zero_passes_every_node_that_fits(api, scheduler_factory, http):
    sched = await scheduler_factory(**{"placement.policy": "binpack", "extender.shortlist": 0})
    names = await _fleet(api, sched, http, 12)
    want = create_pod(api, gpu_pod("want", gpu="1", mem="10000"))
    assert (await sched.post(http, "filter", filter_args(want, names)))["NodeNames"] == names


async def test_refusals_are_named_beside_a_shortlist_and_whole_when_nothing_fits(
    api, scheduler_factory, http
):
    sched = await scheduler_factory(**{"extender.shortlist": 2})
    names = add_nodes(api, 5)
    api.put("nodes", node("bare"))
    await sched.settle(api)
    want = create_pod(api, gpu_pod("want", gpu="1", mem="10000"))
    result = await sched.post(http, "filter", filter_args(want, [*names, "bare"]))
    assert len(result["NodeNames"]) == 2
    # The node that cannot take it still says why (kube-scheduler's diagnosis reads it).
    assert set(result["FailedAndUnresolvableNodes"]) == {"bare"}
    huge = create_pod(api, gpu_pod("huge", gpu="9"))
    result = await sched.post(http, "filter", filter_args(huge, [*names, "bare"]))
    assert not result["NodeNames"]
    assert set(result["FailedAndUnresolvableNodes"]) | set(result["FailedNodes"]) == {
        *names,
        "bare",
    }

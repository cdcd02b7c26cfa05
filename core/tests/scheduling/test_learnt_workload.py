"""The workload a policy learns: fixed memory, per-pod cost independent of history, and a
refresh that may fail without failing anyone's request."""

from __future__ import annotations

from typing import Any

import pytest

from xpushare.models import ContainerRequest
from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.plugins.builtin import mock as mock_plugin
from xpushare.scheduling import FragmentationPolicy, PodRequest, TaskShape, Workload
from xpushare.scheduling.hostaware import FgdCpuPolicy
from xpushare.scheduling.workload import (
    HALF_LIFE_PODS,
    MAX_CONSTRAINT_CHARS,
    MAX_LEARNT_SHAPES,
    MAX_SHAPE_SHARE,
    MAX_WORKLOAD_SHAPES,
    MODEL_TOLERANCE,
    REFRESH_EVERY,
    RETRY_AFTER,
    WEIGHT_SCALE,
    LearntWorkload,
    coarse,
    learnt_shape,
)
from xpushare.simulator import Simulation, read_nodes, read_tasks
from xpushare.simulator.datasets import SAMPLE_NODES, SAMPLE_PODS
from xpushare.simulator.fleet import pod_view


def pod(cpu: int = 0, **kw: Any) -> PodRequest:
    return PodRequest.build([ContainerRequest(vendor="acme", **kw)], cpu_milli=cpu)


def test_shapes_are_quantised_to_four_leading_bits_rounded_up() -> None:
    assert [coarse(n) for n in (0, 1, 15, 16, 17, 1000, 1024, 1025, 40_000)] == [
        0,
        1,
        15,
        16,
        18,
        1024,
        1024,
        1152,
        40_960,
    ]
    for n in range(1, 5000):
        assert n <= coarse(n) <= n * 1.125


def test_a_learnt_shape_keeps_what_the_measure_reads_and_drops_uuids() -> None:
    shape = learnt_shape(
        pod(
            cpu=3_100,
            count=3,
            memory_mib=1000,
            compute_percent=30,
            models_include=("A100",),
            uuids_exclude=("GPU-1",),
        )
    )
    assert shape is not None and shape.demand is not None
    assert (shape.cpu_milli, shape.demand.count, shape.demand.memory_mib) == (3_328, 3, 1024)
    assert shape.demand.compute == 30 and shape.demand.include_models == ("A100",)
    assert shape.demand.exclude_uuids == frozenset()
    assert learnt_shape(pod(memory_mib=1001)) == learnt_shape(pod(memory_mib=1020))
    huge = ("X" * (MAX_CONSTRAINT_CHARS + 1),)
    assert learnt_shape(pod(models_include=huge)) is None  # no pod can make entries large


def test_the_table_and_the_workload_stay_at_their_caps_whatever_arrives() -> None:
    learnt = LearntWorkload()
    for i in range(20_000):  # 10,000 distinct shapes (compute x percent), each twice
        learnt.observe(pod(memory_percent=1 + i % 100, compute_percent=(i // 100) % 100))
        assert len(learnt) <= MAX_LEARNT_SHAPES
    workload = learnt.workload()
    assert 0 < len(workload) <= MAX_WORKLOAD_SHAPES
    # Integer weights: the meters' sums stay exact (batch and scalar agree to the bit).
    assert all(w == int(w) and 1 <= w <= WEIGHT_SCALE for w in workload.raw)


def test_counts_decay_so_the_model_follows_the_workload() -> None:
    learnt = LearntWorkload(half_life=1_000)
    old, new = pod(memory_mib=2048), pod(memory_mib=8192)
    for _ in range(5_000):
        learnt.observe(old)
    for _ in range(20_000):  # twenty half-lives: the old shape weighs a millionth
        learnt.observe(new)
    shapes = learnt.workload().shapes
    assert [s.demand.memory_mib for s in shapes if s.demand] == [8192]
    assert len(learnt) == 1  # forgotten, so the bound on one shape gives it no share back


def test_the_count_never_overflows() -> None:
    learnt = LearntWorkload(half_life=10)  # the increment doubles every 10 pods
    for i in range(5_000):
        learnt.observe(pod(memory_percent=1 + i % 3))
    assert all(0 < n < 2.0**80 for n in learnt.counts.values())
    assert len(learnt.workload()) == 3


def test_refreshes_come_after_1_2_4_pods_then_at_a_fixed_period() -> None:
    learnt = LearntWorkload()
    due = []
    for i in range(1, 3 * REFRESH_EVERY + 1):
        if learnt.observe(pod(memory_percent=10)):
            learnt.workload()
            due.append(i)
    assert due[:4] == [1, 2, 4, 8]
    assert due[-3:] == [REFRESH_EVERY, 2 * REFRESH_EVERY, 3 * REFRESH_EVERY]


def test_a_stable_workload_is_not_replaced_at_each_refresh() -> None:
    policy = FragmentationPolicy()
    shapes = [pod(memory_percent=p) for p in (10, 20, 40)]
    for i in range(4 * REFRESH_EVERY):
        policy.observe(shapes[i % 3])
    generation = policy.generation
    for i in range(4 * REFRESH_EVERY):
        policy.observe(shapes[i % 3])
    assert policy.generation == generation  # the engine's answers stay valid


@pytest.mark.parametrize("policy_type", [FragmentationPolicy, FgdCpuPolicy])
def test_a_failed_refresh_is_counted_logged_and_retried_never_raised(
    policy_type: type[FragmentationPolicy], caplog: pytest.LogCaptureFixture
) -> None:
    policy = policy_type()
    errors: list[tuple[str, BaseException]] = []
    policy.on_model_error = lambda name, exc: errors.append((name, exc))
    real = policy.learnt.workload
    failing = [True]

    def refresh() -> Workload:
        if failing[0]:
            raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")
        return real()

    policy.learnt.workload = refresh  # type: ignore[method-assign]
    for _ in range(3 * RETRY_AFTER):
        policy.observe(pod(memory_percent=30))  # never raises
    assert policy.model_errors == 3 and len(errors) == 3
    assert errors[0][0] == policy.name and isinstance(errors[0][1], ValueError)
    assert "refreshing the learnt workload failed" in caplog.text
    assert len(policy.workload) == 0  # the model in use stays
    failing[0] = False
    for _ in range(RETRY_AFTER):
        policy.observe(pod(memory_percent=30))
    assert policy.model_errors == 3
    assert [s.demand.memory_percent for s in policy.workload.shapes if s.demand] == [30]


def test_a_failing_error_hook_does_not_fail_the_request() -> None:
    policy = FragmentationPolicy()

    def broken_hook(name: str, exc: BaseException) -> None:
        raise RuntimeError("metrics are down")

    def broken_refresh() -> Workload:
        raise OverflowError("boom")

    policy.on_model_error = broken_hook
    policy.learnt.workload = broken_refresh  # type: ignore[method-assign]
    policy.observe(pod(memory_percent=30))
    assert policy.model_errors == 1


def test_a_given_workload_is_used_exactly_as_given() -> None:
    """Quantising is for learnt shapes only: the simulator's workload keeps its sizes."""
    exact = pod(cpu=3_100, memory_mib=1000)
    given = Workload.from_requests([exact, exact, pod(memory_mib=1001)])
    assert [s.demand.memory_mib for s in given.shapes if s.demand] == [1000, 1001]
    assert given.shapes[0] == TaskShape.of(exact)
    policy = FragmentationPolicy(given)
    for _ in range(100):
        policy.observe(pod(memory_mib=5000))
    assert policy.workload is given and policy.learnt.seen == 0


def weights_of(workload: Workload) -> dict[TaskShape, float]:
    return dict(zip(workload.shapes, workload.weights, strict=True))


def test_a_flood_of_one_shape_weighs_at_most_the_cap_and_keeps_the_others_ratios() -> None:
    learnt = LearntWorkload()
    mix = [pod(memory_percent=p) for p in (10, 20, 40, 80)]
    for i in range(1_000):
        learnt.observe(mix[i % 4 if i % 10 else 0])  # 10 % twice as frequent
    before = weights_of(learnt.workload())
    flood = pod(memory_mib=7_000, compute_percent=70)
    for _ in range(10 * HALF_LIFE_PODS):  # ten half-lives: the mix counts a thousandth
        if learnt.observe(flood):
            workload = learnt.workload()
            assert max(workload.weights) <= MAX_SHAPE_SHARE
            assert all(w == int(w) and 1 <= w <= WEIGHT_SCALE for w in workload.raw)
    after = weights_of(learnt.workload())
    flooded = learnt_shape(flood)
    assert flooded is not None
    assert after[flooded] == pytest.approx(MAX_SHAPE_SHARE, abs=1e-6)  # as much as allowed
    assert set(after) == {*before, flooded}  # the coverage cut did not drop the mix
    # The rest renormalised: the mix's shapes in the proportions they were learnt in.
    rest = 1 - after[flooded]
    for shape, w in before.items():
        assert after[shape] / rest == pytest.approx(w, rel=1e-4)


def test_a_flood_stays_bounded_for_as_long_as_other_pods_arrive() -> None:
    learnt = LearntWorkload(half_life=1_000)
    mix = [pod(memory_percent=p) for p in (10, 20, 40, 80)]
    flood = pod(memory_mib=7_000, compute_percent=70)
    flooded = learnt_shape(flood)
    assert flooded is not None
    for i in range(30_000):  # thirty half-lives, 99 flood pods to one of the mix
        if learnt.observe(mix[i // 100 % 4] if i % 100 == 0 else flood) and i > 1_000:
            weights = weights_of(learnt.workload())
            assert weights[flooded] == pytest.approx(MAX_SHAPE_SHARE, abs=1e-6)
            assert weights[flooded] <= MAX_SHAPE_SHARE
    assert len(learnt) == 5  # the mix still arrives: none of it is forgotten


def test_a_workload_of_one_shape_weighs_it_fully() -> None:
    learnt = LearntWorkload()
    for _ in range(100):
        learnt.observe(pod(memory_percent=30))
    assert learnt.workload().weights == (1.0,)  # nothing to weigh instead


def test_the_bound_is_above_one_half() -> None:
    for bad in (0.5, 0.2, 1.5):
        with pytest.raises(ValueError, match="max_share"):
            LearntWorkload(max_share=bad)


def sample_requests() -> list[PodRequest]:
    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("mock", mock_plugin)
    tasks = read_tasks(SAMPLE_PODS)
    sim = Simulation(read_nodes(SAMPLE_NODES), tasks, host=host)
    placer = sim.request_parser()
    return [placer.request(pod_view(task, sim.names)) for task in tasks]


def test_a_real_traces_learnt_workload_is_not_changed_by_the_bound() -> None:
    """The embedded openb sample, learnt in its order: every refresh from 16 pods on (the
    first ones are a handful of pods) is the workload learnt with no bound at all."""
    bounded, free = LearntWorkload(), LearntWorkload(max_share=1.0)
    refreshes = 0
    for i, request in enumerate(sample_requests(), 1):
        due = bounded.observe(request)
        assert free.observe(request) == due
        if due:
            mine, theirs = bounded.workload(), free.workload()
            if i >= 16:
                assert mine.distance(theirs) < MODEL_TOLERANCE, i
                assert mine.shapes == theirs.shapes and mine.raw == theirs.raw, i
                refreshes += 1
    assert refreshes >= 7  # 16, 32, ..., 1,024 and the full period after

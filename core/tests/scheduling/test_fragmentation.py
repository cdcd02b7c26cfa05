"""The fragmentation measure on small fleets, against values worked out by hand."""

from __future__ import annotations

from typing import Any

import pytest

from xpushare.models import (
    ContainerAssignment,
    ContainerRequest,
    Device,
    DeviceSlice,
    PodAssignment,
)
from xpushare.placement import Placer
from xpushare.scheduling import (
    FragmentationMeter,
    FragmentationPolicy,
    PodRequest,
    TaskShape,
    UsageLedger,
    Workload,
)
from xpushare.scheduling.fragmentation import fgd_score
from xpushare.scheduling.hostaware import (
    SCARCITY_WEIGHT,
    FgdCpuPolicy,
    host_share,
    model_capacity,
    scarcity_weighted,
)


def gpus(node: str, n: int, model: str = "A100") -> list[Device]:
    return [
        Device(vendor="acme", id=f"{node}-{i}", index=i, model=model, memory_mib=1000)
        for i in range(n)
    ]


def use(ledger: UsageLedger, key: str, node: str, device: int, percent: int) -> None:
    """Book *percent* of the memory and compute of one device."""
    s = DeviceSlice(device_id=f"{node}-{device}", memory_mib=10 * percent, compute_percent=percent)
    a = PodAssignment(
        node=node, containers=(ContainerAssignment(container="c", vendor="acme", devices=(s,)),)
    )
    ledger.add(key, a)


def pod(cpu: int = 0, **kw: Any) -> PodRequest:
    if not kw:
        return PodRequest.build(cpu_milli=cpu)
    return PodRequest.build([ContainerRequest(vendor="acme", **kw)], cpu_milli=cpu)


def share(percent: int, cpu: int = 0) -> PodRequest:
    return pod(cpu, memory_percent=percent, compute_percent=percent)


def whole(n: int, cpu: int = 0) -> PodRequest:
    return pod(cpu, count=n, compute_percent=100, exclusive=True)


def workload(*pairs: tuple[PodRequest, float]) -> Workload:
    return Workload([TaskShape.of(r) for r, _ in pairs], [w for _, w in pairs])


@pytest.fixture
def fleet() -> UsageLedger:
    """One node, 2 GPUs: GPU0 entirely free (1000 units), GPU1 with 300 units free."""
    ledger = UsageLedger()
    ledger.set_node("n", gpus("n", 2), cpu_milli=32000, memory_mib=100000)
    use(ledger, "p", "n", 1, 70)
    return ledger


def test_hand_worked_node(fleet: UsageLedger) -> None:
    w = workload((share(50), 0.5), (whole(1), 0.25), (whole(2), 0.25))
    # 50 % task: GPU1 (300 free) cannot hold it -> 300.
    # 1-GPU task: GPU1 is not entirely free -> 300.
    # 2-GPU task: only one entirely free GPU, cannot run at all -> all 1300.
    expected = 0.5 * 300 + 0.25 * 300 + 0.25 * 1300
    assert FragmentationMeter(w).node_frag(fleet.nodes["n"]) == pytest.approx(expected)  # 550


def test_a_task_the_node_lacks_cpu_for_cannot_use_any_of_it(fleet: UsageLedger) -> None:
    w = workload((share(50, cpu=40000), 0.5), (whole(1), 0.5))
    # 40 cores > 32: the 50 % task cannot run here, all 1300 free units are lost to it.
    assert FragmentationMeter(w).node_frag(fleet.nodes["n"]) == pytest.approx(
        0.5 * 1300 + 0.5 * 300
    )


def test_model_constraints_and_cpu_only_tasks(fleet: UsageLedger) -> None:
    t4_only = pod(memory_percent=10, compute_percent=10, models_include=("T4",))
    w = workload((t4_only, 0.5), (pod(cpu=1000), 0.5))
    # Neither task can use the node's GPUs: both see all 1300 free units.
    assert FragmentationMeter(w).node_frag(fleet.nodes["n"]) == pytest.approx(1300)


def test_an_empty_and_a_full_node() -> None:
    ledger = UsageLedger()
    ledger.set_node("empty", gpus("empty", 4), cpu_milli=8000)
    ledger.set_node("full", gpus("full", 2), cpu_milli=8000)
    use(ledger, "a", "full", 0, 100)
    use(ledger, "b", "full", 1, 100)
    w = workload((share(30), 0.5), (whole(4), 0.5))
    meter = FragmentationMeter(w)
    assert meter.node_frag(ledger.nodes["empty"]) == 0
    assert meter.node_frag(ledger.nodes["full"]) == 0


def test_fgd_moves_a_task_where_fragmentation_grows_least() -> None:
    # GPUs with 1000 and 600 free, every task asks 40 %. Best-fit would squeeze the task
    # onto the 600 GPU (leaving 200 nobody can use); FGD keeps both GPUs able to take one.
    ledger = UsageLedger()
    ledger.set_node("n", gpus("n", 2))
    use(ledger, "p", "n", 1, 40)
    task = share(40)
    policy = FragmentationPolicy(workload((task, 1.0)))
    growth, picks, *_ = policy.best(ledger.nodes["n"], task, picks=True)
    assert picks is not None and picks[0][0].id == "n-0"
    assert growth == 0
    # Putting it on GPU1 instead would have left 200 units unusable.
    meter = policy.meter
    after = meter.frag_after(
        ledger.nodes["n"],
        [
            (
                ledger.nodes["n"].tables["acme"],
                [(ledger.nodes["n"].tables["acme"].devices[1], 400, 40, False, None)],
            )
        ],
        0,
        0,
    )
    assert after == 200


def test_fgd_score_is_the_authors_integer_sigmoid_of_the_growth() -> None:
    # int(100 x sigmoid(-growth / 1000)), truncated: 50 at no change, 26 at +1 GPU, 73 at -1.
    assert [fgd_score(g) for g in (0, -1, 1, 40, 41, 1000, -1000)] == [50, 50, 49, 49, 48, 26, 73]
    assert fgd_score(float("inf")) == 0  # no fit
    assert fgd_score(10**9) == 0 and fgd_score(-(10**9)) == 100  # no overflow at the ends
    # Monotone: less growth never scores lower.
    scores = [fgd_score(g) for g in range(-9000, 9000, 7)]
    assert scores == sorted(scores, reverse=True)


def test_fgd_ties_on_the_integer_score_go_to_the_first_node_in_the_fleet() -> None:
    # Two 1-GPU nodes; "b" has 30 % booked. A 60 % task grows fragmentation by 8 units on
    # the empty node (its 400 left cannot hold the rare 50 % shape) and by 2 on "b": both
    # score 49, so FGD takes the node registered first. fgd-cpu, the default, settles the
    # tie by the CPU-aware growth (with no CPU asked, FGD's own: 2 on "b", 8 on "a") and
    # takes "b" whatever the order, unless the workload is pinned to models: then it is FGD.
    w = workload((share(50), 0.02), (share(10), 0.98))
    pinned = workload(
        (pod(memory_percent=50, compute_percent=50, models_include=("A100",)), 0.02),
        (pod(memory_percent=10, compute_percent=10, models_include=("A100",)), 0.98),
    )
    task = share(60)
    for order in (("a", "b"), ("b", "a")):
        ledger = UsageLedger()
        for name in order:
            ledger.set_node(name, gpus(name, 1))
        use(ledger, "p", "b", 0, 30)
        fgd = FragmentationPolicy(w)
        nodes = ledger.nodes
        assert [fgd.best(nodes[n], task).growth for n in "ab"] == [8, 2]
        assert [fgd.score(nodes[n], task) for n in "ab"] == [49, 49]
        assert fgd.score_many([nodes["a"], nodes["b"]], task) == [49, 49]
        assert Placer(ledger, fgd).select(task) == order[0]
        cpu = FgdCpuPolicy(w)
        assert Placer(ledger, cpu).select(task) == "b"
        cpu_pinned = FgdCpuPolicy(pinned)
        assert not cpu_pinned.cpu_aware
        assert [cpu_pinned.score(nodes[n], task) for n in "ab"] == [49, 49]
        assert Placer(ledger, cpu_pinned).select(task) == order[0]


def test_fgd_cpu_ranks_by_the_integer_score_then_the_cpu_aware_growth() -> None:
    # Shapes: 50 % of a GPU, no CPU (2 %); 10 % with 4 cores (98 %). The task: 60 % with 8.
    # "x": an empty GPU and 12 cores free. After the task its 400 units cannot hold the 50 %
    # shape (FGD growth 8), but its cores were stranding GPU capacity: 3 copies of the 10 %
    # shape could run before (700 units stranded), 1 after (300), so the CPU-aware measure
    # shrinks by 384. "y": a GPU 30 % booked and 64 cores: FGD growth 2, CPU-aware growth 2.
    # The exact growth prefers "y"; both score 49, and the sum of the two growths (-376
    # against 4) prefers "x".
    w = workload((share(50), 0.02), (share(10, cpu=4000), 0.98))
    task = share(60, cpu=8000)
    for order in (("x", "y"), ("y", "x")):
        ledger = UsageLedger()
        for name in order:
            ledger.set_node(name, gpus(name, 1), cpu_milli=12000 if name == "x" else 64000)
        use(ledger, "p", "y", 0, 30)
        nodes = ledger.nodes
        fgd = FragmentationPolicy(w)
        assert [fgd.best(nodes[n], task).growth for n in "xy"] == [8, 2]
        policy = FgdCpuPolicy(w)
        assert policy.cpu_aware
        keys = [policy.score(nodes[n], task) for n in "xy"]
        assert [k[:2] for k in keys] == [(49, 376), (49, -4)]  # type: ignore[index]
        assert policy.score_many([nodes["x"], nodes["y"]], task) == keys
        assert Placer(ledger, policy).select(task) == "x"


def test_fgd_cpu_settles_ties_by_both_growths_not_the_cpu_aware_one_alone() -> None:
    # Shapes: 50 % of a GPU, no CPU (10 %); 5 % with 4 cores (90 %). The task: 60 % with 44.
    # "x": an empty GPU and 48 cores. After the task its 400 units cannot hold the 50 %
    # shape (FGD growth 40), but its cores stranded capacity of the 5 % shape: 12 copies
    # could run before (850 units stranded), 1 after (350 of 400): the CPU-aware growth is
    # 40 - 0.9 x 50 = -5. "y": a GPU 30 % booked and 64 cores: both growths 10 (its 100
    # units left cannot hold the 50 % shape). Both score 49. The CPU-aware growth alone
    # prefers "x" (-5 against 10), the sum of both growths "y" (20 against 35): FGD's own
    # difference inside a score step counts as much as the CPU's (docs/simulator.md, "What
    # was tried": on multigpu30 and multigpu40 the sum placed more).
    w = workload((share(50), 0.1), (share(5, cpu=4000), 0.9))
    task = share(60, cpu=44000)
    for order in (("x", "y"), ("y", "x")):
        ledger = UsageLedger()
        for name in order:
            ledger.set_node(name, gpus(name, 1), cpu_milli=48000 if name == "x" else 64000)
        use(ledger, "p", "y", 0, 30)
        nodes = ledger.nodes
        fgd = FragmentationPolicy(w)
        assert [round(fgd.best(nodes[n], task).growth, 6) for n in "xy"] == [40, 10]
        policy = FgdCpuPolicy(w)
        keys = [policy.score(nodes[n], task) for n in "xy"]
        assert [k[0] for k in keys] == [49, 49]  # type: ignore[index]
        assert [
            round(policy._tie(nodes[n], task, policy.best(nodes[n], task)), 6) for n in "xy"
        ] == [-5, 10]
        assert [round(k[1], 6) for k in keys] == [-35, -20]  # type: ignore[index]
        assert policy.score_many([nodes["x"], nodes["y"]], task) == keys
        assert Placer(ledger, policy).select(task) == "y"


def test_workload_keeps_the_most_popular_shapes_up_to_the_coverage() -> None:
    requests = [share(50)] * 6 + [whole(1)] * 3 + [whole(8)]
    w = Workload.from_requests(requests, coverage=0.9)
    assert len(w) == 2
    assert w.weights == pytest.approx((6 / 9, 3 / 9))
    assert len(Workload.from_requests(requests, coverage=1.0)) == 3


def test_a_policy_without_a_workload_learns_it_from_the_pods_it_sees() -> None:
    policy = FragmentationPolicy()
    assert len(policy.workload) == 0
    policy.observe(share(30))
    assert [s.demand.memory_percent for s in policy.workload.shapes if s.demand] == [30]


def test_scarcity_weights_pinned_shapes_by_their_models_pressure() -> None:
    # Fleet: 4 G2 and 2 T4 GPUs. Half the GPU demand is pinned to T4, whose share of the
    # fleet is a third: pressure 0.5 / (2/6) = 1.5, so the pinned shape weighs
    # 1 + SCARCITY_WEIGHT x 1.5 = 31 times its frequency against 1 for the unpinned one.
    ledger = UsageLedger()
    ledger.set_node("g", gpus("g", 4, "G2"))
    ledger.set_node("t", gpus("t", 2, "T4"))
    capacity = model_capacity(ledger)
    assert capacity == {("acme", "G2"): 4, ("acme", "T4"): 2}
    t4_only = pod(count=1, compute_percent=100, exclusive=True, models_include=("T4",))
    w = workload((whole(1), 0.5), (t4_only, 0.5))
    weighted = scarcity_weighted(w, capacity)
    assert weighted.shapes == w.shapes
    assert weighted.raw[1] / weighted.raw[0] == 1 + SCARCITY_WEIGHT * 1.5
    # No pinned shape, or no fleet known: the workload itself, measured exactly as FGD's.
    plain = workload((whole(1), 0.5), (share(50), 0.5))
    assert scarcity_weighted(plain, capacity) is plain
    assert scarcity_weighted(w, {}) is w


def test_fgd_cpu_leaves_a_scarce_model_to_the_tasks_pinned_to_it() -> None:
    # One T4 node, empty, and one G2 node with its GPU half booked. Shapes: 50 % of any GPU
    # (90 %), 50 % of a T4 only (10 %). A 40 % task that may run anywhere: on the T4 it
    # leaves 600 that both shapes can use (FGD growth 0); on the G2, 100 that neither can,
    # growth 0.9 x 100 + 0.1 x 100 - 0.1 x 500 (the G2's 500 were all fragment to the T4
    # shape) = 50, so FGD takes the T4 (score 50 against 48). The T4s are a half of the
    # fleet's GPUs and the pinned tasks a tenth of the demand: pressure 0.2, the pinned
    # shape weighs 5 times its frequency, and the G2 grows fragmentation by 100 - 5/14 x
    # 500 = -78.6 (score 51): fgd-cpu keeps the T4 for the tasks that can use nothing else.
    t4_share = pod(memory_percent=50, compute_percent=50, models_include=("T4",))
    w = workload((share(50), 0.9), (t4_share, 0.1))
    task = share(40)
    for order in (("t4", "g2"), ("g2", "t4")):
        ledger = UsageLedger()
        for name in order:
            ledger.set_node(name, gpus(name, 1, name.upper()))
        use(ledger, "p", "g2", 0, 50)
        nodes = ledger.nodes
        fgd = FragmentationPolicy(w)
        assert [fgd.best(nodes[n], task).growth for n in ("t4", "g2")] == [0, 50]
        assert Placer(ledger, fgd).select(task) == "t4"
        policy = FgdCpuPolicy(w)
        assert policy.weighted is w  # no ledger attached yet: the fleet is unknown
        assert Placer(ledger, policy).select(task) == "g2"
        assert policy.capacity == {("acme", "T4"): 1, ("acme", "G2"): 1}
        assert policy.best(nodes["g2"], task).growth == pytest.approx(100 - 500 * 5 / 14)
        assert [policy.score(nodes[n], task)[0] for n in ("t4", "g2")] == [50, 51]  # type: ignore[index]


def test_fgd_cpu_reads_the_fleet_again_when_nodes_join() -> None:
    t4_only = pod(count=1, compute_percent=100, exclusive=True, models_include=("T4",))
    w = workload((whole(1), 0.5), (t4_only, 0.5))
    ledger = UsageLedger()
    ledger.set_node("t", gpus("t", 2, "T4"))
    policy = FgdCpuPolicy(w)
    Placer(ledger, policy)
    # Only T4s: pressure 0.5 / 1, the pinned shape weighs 11 times its frequency.
    assert policy.weighted.raw[1] / policy.weighted.raw[0] == 1 + SCARCITY_WEIGHT * 0.5
    generation = policy.generation
    ledger.set_node("g", gpus("g", 4, "G2"))
    policy.observe(whole(1))  # the engine's first step for every pod
    assert policy.capacity == {("acme", "T4"): 2, ("acme", "G2"): 4}
    assert policy.weighted.raw[1] / policy.weighted.raw[0] == 1 + SCARCITY_WEIGHT * 1.5
    assert policy.generation > generation  # the answers of the old weights are stale
    generation = policy.generation
    policy.observe(whole(1))  # the same fleet: nothing measured again
    assert policy.generation == generation


def test_workload_keeps_the_shapes_below_its_cut_apart() -> None:
    counts = {
        TaskShape.of(share(50)): 6.0,
        TaskShape.of(whole(1)): 3.0,
        TaskShape.of(whole(8)): 1.0,
    }
    w = Workload.from_counts(counts, coverage=0.9)
    assert w.shapes == (TaskShape.of(share(50)), TaskShape.of(whole(1)))
    assert w.below == ((TaskShape.of(whole(8)), 1.0),)
    assert Workload.from_counts(counts, coverage=1.0).below == ()
    limited = Workload.from_counts(counts, coverage=1.0, limit=1)
    assert [s for s, _ in limited.below] == [TaskShape.of(whole(1)), TaskShape.of(whole(8))]


def test_fgd_cpu_takes_back_a_rare_host_shape_below_the_cut_and_keeps_its_hosts() -> None:
    # Two nodes "p" (4 GPUs, 48 cores) and one "r" (4 GPUs, 60 cores). Shapes: 1 GPU with 16
    # cores (96 tasks), and below the 95 % cut 4 GPUs with 56 cores (4 tasks), which only "r"
    # can host: a third of the GPUs. A 1-GPU, 4-core task grows FGD's fragmentation by
    # nothing anywhere (score 50 on both). The CPU-aware measure prefers "r": its 60 cores
    # run 3 copies of the 16-core shape before and after (one GPU of four stranded before,
    # none after: growth -1,000), while "p" goes from 3 copies to 2 (growth 0). With the
    # rare shape taken back at its frequency, "r" loses what the 4-GPU task needed (3,000 x
    # 4/100 = 120, score 47) and "p" gains (the rare shape could not use its 4,000 before,
    # its 3,000 after: -40, score 50): fgd-cpu takes "p", leaving "r" to the 4-GPU tasks.
    small = whole(1, cpu=16000)
    rare = whole(4, cpu=56000)
    w = Workload.from_counts({TaskShape.of(small): 96.0, TaskShape.of(rare): 4.0})
    assert w.shapes == (TaskShape.of(small),)
    task = whole(1, cpu=4000)
    for order in (("p1", "p2", "r"), ("r", "p1", "p2")):
        ledger = UsageLedger()
        for name in order:
            ledger.set_node(name, gpus(name, 4), cpu_milli=60000 if name == "r" else 48000)
        nodes = ledger.nodes
        blind = FgdCpuPolicy(w)  # no ledger: the fleet, so which shapes are rare-host, unknown
        assert blind.weighted is w
        assert blind.score(nodes["r"], task)[:2] == (50, 1000)  # type: ignore[index]
        assert blind.score(nodes["p1"], task)[:2] == (50, 0)  # type: ignore[index]
        assert max(("p1", "r"), key=lambda n: blind.score(nodes[n], task)) == "r"
        policy = FgdCpuPolicy(w)
        placer = Placer(ledger, policy)
        assert host_share(TaskShape.of(rare), policy.kinds) == pytest.approx(1 / 3)
        assert policy.weighted.shapes == (TaskShape.of(small), TaskShape.of(rare))
        assert policy.weighted.raw == (96.0, 4.0)
        assert policy.best(nodes["r"], task).growth == pytest.approx(120)
        assert policy.best(nodes["p1"], task).growth == pytest.approx(-40)
        assert placer.select(task) in ("p1", "p2")
        # A shape that half the fleet's GPUs or more can host is not taken back.
        assert host_share(TaskShape.of(whole(4, cpu=40000)), policy.kinds) == 1.0


def test_fgd_cpu_takes_rare_host_shapes_back_only_where_it_settles_ties_by_cpu() -> None:
    # As above, with every shape pinned to the A100 (beyond PINNED_LIMIT): fgd-cpu is FGD
    # with the scarcity weights there, and the 4-GPU shape stays out.
    small = pod(16000, count=1, compute_percent=100, exclusive=True, models_include=("A100",))
    rare = pod(56000, count=4, compute_percent=100, exclusive=True, models_include=("A100",))
    w = Workload.from_counts({TaskShape.of(small): 96.0, TaskShape.of(rare): 4.0})
    ledger = UsageLedger()
    for name in ("p1", "p2", "r"):
        ledger.set_node(name, gpus(name, 4), cpu_milli=60000 if name == "r" else 48000)
    policy = FgdCpuPolicy(w)
    Placer(ledger, policy)
    assert not policy.cpu_aware
    assert policy.weighted.shapes == w.shapes

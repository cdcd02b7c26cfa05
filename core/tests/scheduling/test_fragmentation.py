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
from xpushare.scheduling.hostaware import FgdCpuPolicy


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
    # The exact growth prefers "y"; both score 49, and the CPU-aware growth prefers "x".
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
        assert [k[:2] for k in keys] == [(49, 384), (49, -2)]  # type: ignore[index]
        assert policy.score_many([nodes["x"], nodes["y"]], task) == keys
        assert Placer(ledger, policy).select(task) == "x"


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

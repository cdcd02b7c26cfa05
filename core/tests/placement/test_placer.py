"""The placement engine: filter, prioritize, decide and the policies on tiny fleets."""

from __future__ import annotations

import random
from typing import Any

import pytest

from xpushare import hookimpl
from xpushare.models import (
    API_VERSION,
    ContainerRequest,
    ContainerView,
    Device,
    FitReason,
    FitResult,
    PodRef,
    PodView,
    ResourceNames,
    VendorSpec,
)
from xpushare.placement import NoFit, PlacementConfig, Placer, policy_registry
from xpushare.placement.results import score_key
from xpushare.plugins import HostSettings, PluginHost, PluginKind
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.plugins.builtin import mock as mock_plugin
from xpushare.scheduling import PodRequest, Policy, UsageLedger
from xpushare.scheduling.request import Demand
from xpushare.scheduling.state import NodeState


def gpus(node: str, n: int, *, model: str = "A100", memory: int = 1000) -> list[Device]:
    return [
        Device(vendor="mock", id=f"{node}-{i}", index=i, model=model, memory_mib=memory)
        for i in range(n)
    ]


def share(percent: int, cpu: int = 0, **kw: Any) -> PodRequest:
    req = ContainerRequest(vendor="mock", memory_percent=percent, compute_percent=percent, **kw)
    return PodRequest.build([req], cpu_milli=cpu)


def whole(n: int, cpu: int = 0) -> PodRequest:
    req = ContainerRequest(vendor="mock", count=n, compute_percent=100, exclusive=True)
    return PodRequest.build([req], cpu_milli=cpu)


def fleet(**nodes: list[int]) -> UsageLedger:
    """Nodes by name -> percent used on each of their GPUs."""
    ledger = UsageLedger()
    for name, used in nodes.items():
        ledger.set_node(name, gpus(name, len(used)), cpu_milli=16000, memory_mib=64000)
        placer = Placer(ledger, "binpack")
        for i, pct in enumerate(used):
            if pct:
                req = share(pct, uuids_include=(f"{name}-{i}",))
                placer.commit(f"{name}/{i}", req, placer.decide(req, name))
    return ledger


def test_filter_says_why_each_node_is_out() -> None:
    ledger = fleet(a=[90, 90], b=[10, 0])
    ledger.set_node("c", gpus("c", 2), cpu_milli=1000)
    result = Placer(ledger, "binpack").filter(share(50, cpu=2000), ["a", "b", "c", "ghost"])
    assert result.fits == ["b"]
    assert "not enough free device compute" in result.failed["a"]
    assert result.failed["c"] == "not enough free CPU on the node"
    assert "unknown to xpushare" in result.failed["ghost"]
    assert result.explain().startswith("1/4 nodes fit")


def test_binpack_spread_and_best_fit_choose_as_named() -> None:
    ledger = fleet(empty=[0, 0], half=[50, 50], busy=[80, 0])
    task = share(20)
    assert Placer(ledger, "binpack").select(task) == "half"
    assert Placer(ledger, "spread").select(task) == "empty"
    # best-fit: least capacity left over -> busy (0.2 + 1.0 free) beats half (0.5 + 0.5)? no:
    # both leave 1.0 GPU after a 0.2 task... busy leaves 0.2 + 0.8 = 1.0, half 0.3 + 0.5 = 0.8.
    assert Placer(ledger, "best-fit").select(task) == "half"


def test_device_order_binpack_and_spread_inside_a_node() -> None:
    ledger = fleet(n=[0, 60, 30])
    task = share(30)
    packed = Placer(ledger, "binpack").decide(task, "n")
    spread = Placer(ledger, "spread").decide(task, "n")
    assert packed.containers[0].devices[0].device_id == "n-1"
    assert spread.containers[0].devices[0].device_id == "n-0"
    # The configured device policy overrides the policy's own.
    cfg = PlacementConfig(device_policy="spread")
    assert (
        Placer(ledger, "binpack", config=cfg).decide(task, "n").containers[0].devices[0].device_id
        == "n-0"
    )


def test_fgd_keeps_whole_gpus_free_for_whole_gpu_tasks() -> None:
    # Two nodes: one with a GPU already shared, one untouched. A small task should go to the
    # shared GPU: on the untouched node it would break a GPU whole-GPU tasks need.
    ledger = fleet(fresh=[0, 0], shared=[40, 0])
    placer = Placer(ledger, "fgd")
    from xpushare.scheduling import Workload

    placer.policy.set_workload(Workload.from_requests([share(30), whole(1), whole(2)]))
    assert placer.select(share(30)) == "shared"
    assignment = placer.decide(share(30), "shared")
    assert assignment.containers[0].devices[0].device_id == "shared-0"


def test_prioritize_scales_to_0_100_with_the_best_at_100() -> None:
    ledger = fleet(a=[0, 0], b=[50, 50], c=[90, 0])
    scores = Placer(ledger, "binpack").prioritize(share(10))
    assert max(scores.values()) == 100.0 and min(scores.values()) == 0.0
    assert scores["b"] == 100.0 and scores["a"] == 0.0


@pytest.mark.parametrize("policy", ["binpack", "fgd-cpu"])
def test_prioritize_each_is_prioritize_in_the_order_asked(policy: str) -> None:
    # /prioritize answers through prioritize_each: the same scores, one per name asked,
    # None where the node does not fit or is unknown, repeats answered each time.
    ledger = fleet(a=[0, 0], b=[50, 50], c=[90, 0], full=[100, 100])
    placer = Placer(ledger, policy)
    names = ["c", "unknown", "full", "a", "b", "a"]
    each = placer.prioritize_each(share(20), names)
    assert [s is None for s in each] == [False, True, True, False, False, False]
    assert each[3] == each[5] and max(s for s in each if s is not None) == 100.0
    if policy == "binpack":  # fullest first: b, then c (one GPU of two 90 % used), a empty
        assert each[4] == 100.0 > each[0] > each[3] == 0.0  # type: ignore[operator]
    by_name = placer.prioritize(share(20), names)
    assert by_name == {n: s for n, s in zip(names, each, strict=True) if s is not None}


@pytest.mark.parametrize("policy", ["binpack", "best-fit", "fgd", "fgd-cpu"])
def test_prioritize_array_is_prioritize_each_with_minus_one_for_none(policy: str) -> None:
    # /filter's shortlist ranks by prioritize_array (distinct verdicts found in numpy): the
    # same score per name as prioritize_each, in the order asked, repeats and unknown nodes
    # included, whether the verdicts are recalled from /filter or read afresh.
    rng = random.Random(7)
    ledger = fleet(
        **{f"n{i}": [rng.choice((0, 10, 50, 90, 100)) for _ in range(2)] for i in range(300)}
    )
    placer = Placer(ledger, policy)
    names = [*ledger.nodes, "unknown", "n3", "n3"]
    rng.shuffle(names)
    for request in (share(20), share(60)):
        each = placer.prioritize_each(request, names)
        want = [-1.0 if s is None else s for s in each]
        assert placer.prioritize_array(request, names).tolist() == want
        # Recalled: /filter's verdicts of the nodes that fit, read back for exactly those.
        fits = [n for n, s in zip(names, each, strict=True) if s is not None]
        assert placer.cache.warm_verdicts(request, names) is not None
        assert placer.cache.recall(request, fits) is not None
        assert placer.prioritize_array(request, fits).tolist() == [s for s in want if s != -1.0]


def test_decide_refuses_a_node_that_does_not_fit() -> None:
    ledger = fleet(a=[100])
    with pytest.raises(NoFit, match="node a"):
        Placer(ledger, "binpack").decide(share(10), "a")


def test_ties_go_to_the_first_node_or_a_seeded_random_one() -> None:
    ledger = fleet(**{f"n{i}": [0] for i in range(8)})
    assert Placer(ledger, "binpack").select(share(10)) == "n0"
    picks = {
        Placer(ledger, "binpack", config=PlacementConfig(tie_break="random", seed=s)).select(
            share(10)
        )
        for s in range(10)
    }
    assert len(picks) > 1
    again = Placer(ledger, "binpack", config=PlacementConfig(tie_break="random", seed=3))
    assert again.select(share(10)) == Placer(
        ledger, "binpack", config=PlacementConfig(tie_break="random", seed=3)
    ).select(share(10))


def test_answers_are_remembered_until_the_node_changes() -> None:
    ledger = fleet(a=[0])
    placer = Placer(ledger, "binpack")
    assert placer.filter(share(60)).fits == ["a"]
    state = ledger.node("a")
    assert state is not None and state.shared, "an answer of the node's state alone"
    before = state.shared
    placer.commit("p", share(60), placer.decide(share(60), "a"))
    assert state.shared is not before and not state.memo, "a change drops its answers"
    assert placer.filter(share(60)).fits == []


def test_nodes_in_one_state_share_their_answers() -> None:
    ledger = fleet(a=[50, 0], b=[0, 50], c=[0, 0])
    a, b, c = (ledger.nodes[n] for n in "abc")
    assert a.shared is b.shared, "the same devices in the same state, in another order"
    assert a.shared is not c.shared
    placer = Placer(ledger, "fgd")
    placer.filter(share(30))
    assert len(a.shared) == 1 and len(c.shared) == 1, "one answer per state"


def test_multi_container_pods_share_a_node_and_init_containers_fit_alone() -> None:
    ledger = fleet(n=[0, 0])
    app = ContainerRequest(vendor="mock", container="app", memory_percent=60, compute_percent=60)
    side = ContainerRequest(vendor="mock", container="side", memory_percent=60, compute_percent=60)
    init = ContainerRequest(vendor="mock", container="init", memory_percent=90, compute_percent=90)
    pod = PodRequest.build([app, side], init=[init])
    assignment = Placer(ledger, "binpack").decide(pod, "n")
    by_name = {c.container: c.devices[0].device_id for c in assignment.containers}
    assert by_name["app"] != by_name["side"], "two 60% containers cannot share one GPU"
    assert assignment.containers[0].init


class _AlwaysLast(Policy):
    name = "last"

    def score(self, node: NodeState, request: PodRequest) -> float:
        return float(node.index)


def test_a_third_party_policy_registered_through_the_hook() -> None:
    class Extension:
        @hookimpl
        def xpushare_register_policies(self, register: Any) -> None:
            register("last", _AlwaysLast)

    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("ext", Extension(), kind=PluginKind.EXTENSION)
    registry = policy_registry(host)
    assert {"binpack", "spread", "best-fit", "fgd", "last"} <= set(registry.names())
    ledger = fleet(a=[0], b=[0], c=[0])
    assert Placer(ledger, "last", host=host).select(share(10)) == "c"
    with pytest.raises(ValueError, match=r"unknown placement policy 'nope'.*known policies"):
        Placer(ledger, "nope", host=host)


def _custom_fit_vendor() -> object:
    class Picky:
        """A vendor with its own fit: only the device with the highest index."""

        @hookimpl
        def xpushare_vendor(self) -> VendorSpec:
            return VendorSpec(
                name="picky",
                api_version=API_VERSION,
                resource_names=ResourceNames(count="picky.example.com/gpu"),
            )

        @hookimpl
        def xpushare_fit(self, request: ContainerRequest, node: Any, usage: Any) -> FitResult:
            free = [d for d in node.devices if usage[d.id].used_slots == 0]
            if not free:
                return FitResult(fits=False, reasons={FitReason.SLOTS_EXHAUSTED: len(node.devices)})
            last = max(free, key=lambda d: d.index)
            from xpushare.models import DeviceSlice

            return FitResult(
                fits=True,
                devices=(
                    DeviceSlice(
                        device_id=last.id, index=last.index, memory_mib=1, compute_percent=0
                    ),
                ),
            )

    return Picky()


def test_a_vendor_with_its_own_fit_is_asked_through_its_hook() -> None:
    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("picky", _custom_fit_vendor())
    ledger = UsageLedger()
    ledger.set_node(
        "n",
        [Device(vendor="picky", id=f"p{i}", index=i, model="P", memory_mib=10) for i in range(3)],
    )
    placer = Placer(ledger, "binpack", host=host)
    pod = PodView(
        ref=PodRef(name="x"),
        containers=(ContainerView(name="c", limits={"picky.example.com/gpu": "1"}),),
    )
    request = placer.request(pod)
    assignment = placer.decide(request, "n")
    assert assignment.containers[0].devices[0].device_id == "p2"
    placer.commit("x", request, assignment)
    assert placer.decide(placer.request(pod), "n").containers[0].devices[0].device_id == "p1"


def test_a_vendor_fit_that_answers_none_falls_back_to_the_default_fit() -> None:
    asked: list[int] = []

    class Partial:
        """Answers two-device requests itself (the last two devices); leaves the rest."""

        @hookimpl
        def xpushare_vendor(self) -> VendorSpec:
            return VendorSpec(
                name="partial",
                api_version=API_VERSION,
                resource_names=ResourceNames(count="partial.example.com/gpu"),
            )

        @hookimpl
        def xpushare_fit(self, request: ContainerRequest, node: Any) -> FitResult | None:
            asked.append(request.count)
            if request.count != 2:
                return None
            from xpushare.models import DeviceSlice

            picked = sorted(node.devices, key=lambda d: d.index)[-2:]
            return FitResult(
                fits=True,
                devices=tuple(
                    DeviceSlice(device_id=d.id, index=d.index, memory_mib=1, compute_percent=0)
                    for d in picked
                ),
            )

    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("partial", Partial())
    handle = host.vendor("partial")
    ledger = UsageLedger()
    devices = [
        Device(vendor="partial", id=f"q{i}", index=i, model="Q", memory_mib=10) for i in range(4)
    ]
    ledger.set_node("n", devices)
    placer = Placer(ledger, "binpack", host=host)

    def pod(count: int) -> PodView:
        limits = {"partial.example.com/gpu": str(count)}
        return PodView(
            ref=PodRef(name=f"p{count}"), containers=(ContainerView(name="c", limits=limits),)
        )

    two = placer.decide(placer.request(pod(2)), "n")
    assert [s.device_id for s in two.containers[0].devices] == ["q2", "q3"]
    one = placer.decide(placer.request(pod(1)), "n")
    # The vendor was asked and said None: the default fit placed it, on a device it chose.
    assert asked[-1] == 1 and len(one.containers[0].devices) == 1
    # The vendor's own answer alone, without the core's default behind it, is None here.
    request = placer.request(pod(1)).demands[0].request
    usage = ledger.device_usage("n", "partial")
    view = ledger.node_view("n", "partial")
    assert handle.own_fit(request=request, node=view, usage=usage, device_order=()) is None
    assert handle.fit(request=request, node=view, usage=usage, device_order=()).fits


def test_pods_are_parsed_by_the_vendors_hooks_with_cpu_and_memory() -> None:
    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("mock", mock_plugin)
    names = host.vendor("mock").spec.resource_names
    pod = PodView(
        ref=PodRef(name="p"),
        annotations={"xpushare.io/use-model": "A100"},
        containers=(
            ContainerView(
                name="init",
                init=True,
                requests={"cpu": "4", "memory": "1Gi"},
            ),
            ContainerView(
                name="main",
                limits={names.count: "1", str(names.memory_percent): "25"},
                requests={"cpu": "500m", "memory": "512Mi"},
            ),
            ContainerView(name="side", requests={"cpu": "1", "memory": "256Mi"}),
        ),
    )
    ledger = UsageLedger()
    request = Placer(ledger, "binpack", host=host).request(pod)
    [demand] = request.demands
    assert isinstance(demand, Demand)
    assert (demand.container, demand.memory_percent, demand.include_models) == (
        "main",
        25,
        ("A100",),
    )
    # kube-scheduler's effective request: max(sum of app containers, largest init container).
    assert (request.cpu_milli, request.memory_mib) == (4000, 1024)


def test_explain_shows_devices_and_reasons_per_container() -> None:
    ledger = fleet(n=[100, 20, 0])
    fit = Placer(ledger, "binpack").explain(share(50), "n")
    assert fit.fits
    [container] = fit.containers
    assert container.devices[0].device_id == "n-1"
    assert container.reasons == {FitReason.INSUFFICIENT_MEMORY: 1}
    miss = Placer(ledger, "binpack").explain(whole(3), "n")
    assert not miss.fits and "exclusive" in miss.reason


def test_fgd_cpu_settles_fgd_ties_by_the_gpus_the_cpu_left_would_strand() -> None:
    # Both nodes have 3 free GPUs; tasks are whole GPUs with 10 cores. A 20-core task on node
    # "a" (35 cores) leaves 2 GPUs but CPU for one more task; on "b" (100 cores) it strands
    # nothing. FGD sees no difference (one more task still fits on either) and takes the first.
    ledger = UsageLedger()
    ledger.set_node("a", gpus("a", 3), cpu_milli=35000)
    ledger.set_node("b", gpus("b", 3), cpu_milli=100000)
    from xpushare.scheduling import Workload

    workload = Workload.from_requests([whole(1, cpu=10000)])
    picks = {}
    for name in ("fgd", "fgd-cpu"):
        placer = Placer(ledger, name)
        placer.policy.set_workload(workload)
        picks[name] = placer.select(whole(1, cpu=20000))
    assert picks == {"fgd": "a", "fgd-cpu": "b"}
    # When much of the workload is pinned to GPU models, fgd-cpu keeps FGD's order.
    pinned = PodRequest.build(
        [
            ContainerRequest(
                vendor="mock",
                count=1,
                compute_percent=100,
                exclusive=True,
                models_include=("A100",),
            )
        ],
        cpu_milli=10000,
    )
    placer = Placer(ledger, "fgd-cpu")
    placer.policy.set_workload(Workload.from_requests([whole(1, cpu=10000), pinned]))
    assert placer.select(whole(1, cpu=20000)) == "a"


def test_a_learning_policy_is_not_answered_from_an_older_workload() -> None:
    # fgd without a workload learns one from the pods it sees. With only 30 % tasks seen,
    # "a" and "b" are alike for a 30 % task (the first wins); once whole-GPU tasks dominate,
    # breaking one of a's whole GPUs costs, and b's shared GPU is the place. An answer
    # remembered under the old workload would still say "a".
    ledger = fleet(a=[0, 0], b=[40, 0])
    placer = Placer(ledger, "fgd")
    assert placer.select(share(30)) == "a"
    before = placer.policy.generation
    for _ in range(4):
        placer.filter(whole(1))
    assert placer.policy.generation > before
    assert placer.select(share(30)) == "b"


def _random_pods(rng: Any, vendor: str, model: str, n: int) -> list[PodRequest]:
    """*n* one-container pods of *vendor*: half shares of one or two devices (some pinned to
    *model*, some NUMA-bound), half whole exclusive devices; each with some CPU."""
    pods = []
    for _ in range(n):
        if rng.random() < 0.5:
            pct = rng.choice((10, 30, 50, 70))
            req = ContainerRequest(
                vendor=vendor,
                count=rng.choice((1, 1, 2)),
                memory_percent=pct,
                compute_percent=pct,
                models_include=rng.choice(((), (model,))),
                numa_bind=rng.random() < 0.2,
            )
        else:
            req = ContainerRequest(
                vendor=vendor, count=rng.choice((1, 2, 4)), compute_percent=100, exclusive=True
            )
        pods.append(PodRequest.build([req], cpu_milli=rng.choice((1000, 4000, 12000))))
    return pods


@pytest.mark.parametrize("policy", ["fgd-cpu", "fgd", "binpack"])
def test_filter_and_scores_agree_with_a_fit_and_score_of_each_node_alone(policy: str) -> None:
    """The engine's shortcuts (answers shared by node state, fit read from the kinds of
    devices, scores measured on arrays) change nothing: every node gets the verdict a
    fresh engine gives it when asked about that node alone."""
    import random

    from xpushare.scheduling import Workload, fit_pod

    rng = random.Random(5)
    ledger = UsageLedger()
    for n in range(60):
        name = f"n{n}"
        ledger.set_node(
            name,
            gpus(name, rng.choice((1, 2, 4, 8)), model=rng.choice(("A100", "T4"))),
            cpu_milli=rng.choice((8000, 32000)),
            memory_mib=64000,
        )
    pods = _random_pods(rng, "mock", "T4", 80)
    workload = Workload.from_requests(pods)
    engine = Placer(ledger, policy)
    engine.policy.set_workload(workload)
    names = list(ledger.nodes)
    for i, request in enumerate(pods):
        result = engine.filter(request, names)
        scores = engine.scores(request, result.fits)
        reference = policy_registry().create(policy)  # scores one node at a time
        reference.attach(ledger)  # the fleet, as the engine's (fgd-cpu's scarcity weights)
        reference.set_workload(workload)
        for name in names:
            node = ledger.nodes[name]
            alone = fit_pod(node, request)
            assert (name in result.fits) == alone.fits, (name, request.describe())
            if alone.fits:
                node.memo = {}
                assert (
                    scores[name] == score_key(reference.score(node, request))[: len(scores[name])]
                )
        if scores:
            best = max(scores, key=lambda n: scores[n])
            engine.commit(f"p{i}", request, engine.decide(request, best))


def test_score_keys_round_every_element_to_nine_digits() -> None:
    """A key's elements are its value's, as floats rounded to 9 digits, whichever path
    score_key takes (ints only converted; FGD's 3-element key element by element)."""
    import random

    rng = random.Random(3)
    values: list[Any] = [0, -0.0, 2**60 + 1, 1e-10, 0.1 + 0.2, -123.4567891235]
    values += [rng.randint(-(10**6), 10**6) for _ in range(200)]
    values += [rng.uniform(-1e4, 1e4) * rng.choice((1, 1e-6)) for _ in range(200)]
    for _ in range(300):
        value = tuple(rng.choice(values) for _ in range(rng.choice((1, 2, 3, 3, 4))))
        want = tuple(round(float(x), 9) for x in value)
        got = score_key(value)
        assert got == want and all(type(x) is float for x in got), value
        assert score_key(value[0]) == want[:1] and type(score_key(value[0])[0]) is float


class _ClaimsFitButSaysNone(Policy):
    """A policy that declares it answers the fit while scoring, and wrongly says no."""

    name = "claims"
    state_pure = True
    fits_in_score = True

    def score(self, node: NodeState, request: PodRequest) -> float:
        return 0.0

    def score_many(self, nodes: Any, request: PodRequest) -> list[Any]:
        return [None for _ in nodes]


def test_a_policy_that_answers_the_fit_is_checked_where_it_says_no(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Where a fits_in_score policy gives no score, the default fit says why; if the pod
    does fit there, the node stays in (lowest score) and the disagreement is logged."""
    ledger = fleet(free=[0], full=[100])
    result = Placer(ledger, _ClaimsFitButSaysNone()).filter(share(50))
    assert result.fits == ["free"]
    assert "full" in result.failed and "1 not enough" in result.failed["full"]
    assert "no score for a node the pod fits" in caplog.text


def _scoped_vendor(applies: Any, asked: list[str]) -> object:
    class Scoped:
        """Answers partition requests and nodes with a linked device itself; leaves the rest."""

        @hookimpl
        def xpushare_vendor(self) -> VendorSpec:
            return VendorSpec(
                name="scoped",
                api_version=API_VERSION,
                resource_names=ResourceNames(count="scoped.example.com/gpu"),
            )

        @hookimpl
        def xpushare_fit_applies(self, devices: Any) -> bool | None:
            return applies(devices)  # type: ignore[no-any-return]

        @hookimpl
        def xpushare_fit(self, request: ContainerRequest, node: Any) -> FitResult | None:
            asked.append(node.name)
            if any(d.model == "LINKED" for d in node.devices):
                return FitResult(fits=False, reasons={FitReason.NOT_ENOUGH_FIT: 1})
            return None

    return Scoped()


def _scoped_fleet() -> UsageLedger:
    ledger = UsageLedger()
    for n in range(6):
        model = "LINKED" if n == 0 else "PLAIN"
        ledger.set_node(
            f"n{n}",
            [
                Device(vendor="scoped", id=f"n{n}-{i}", index=i, model=model, memory_mib=10)
                for i in range(2)
            ],
        )
    return ledger


def _scoped_pod(count: int) -> PodView:
    limits = {"scoped.example.com/gpu": str(count)}
    return PodView(ref=PodRef(name="p"), containers=(ContainerView(name="c", limits=limits),))


@pytest.mark.parametrize(
    ("applies", "skipped"),
    [
        # The vendor's own fit decides on the linked node only: the others are never shown to it.
        (lambda ds: any(d.model == "LINKED" for d in ds), True),
        (lambda ds: None, False),  # no opinion: asked everywhere, as without the hook
        (lambda ds: 1 / 0, False),  # a broken hook costs speed, never a wrong answer
        (lambda ds: "no", False),  # not a bool: likewise
    ],
)
def test_fit_applies_spares_the_vendor_fit_where_it_says_so(applies: Any, skipped: bool) -> None:
    asked: list[str] = []
    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("scoped", _scoped_vendor(applies, asked))
    ledger = _scoped_fleet()
    placer = Placer(ledger, "binpack", host=host)
    for count in (1, 2, 1, 2):
        result = placer.filter(placer.request(_scoped_pod(count)), list(ledger.nodes))
        # The same answers either way: the linked node refused by the vendor, the rest fit.
        assert sorted(result.fits) == [f"n{n}" for n in range(1, 6)]
        assert list(result.failed) == ["n0"]
    if skipped:
        assert set(asked) == {"n0"}
    else:
        assert set(asked) == {f"n{n}" for n in range(6)}


@pytest.mark.parametrize("policy", ["fgd-cpu", "binpack"])
def test_nodes_a_vendor_fit_leaves_to_the_core_share_their_answers_per_state(policy: str) -> None:
    """A vendor with its own fit (here: on LINKED nodes only, as NVIDIA's on NVLink and MIG)
    used to make every verdict a per-node one; where its fit leaves the decision to the core,
    nodes in one state now share one answer. The scores are the same as node by node, while
    the fleet changes, and far fewer nodes are worked out."""
    import random

    from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment

    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("scoped", _scoped_vendor(lambda ds: any(d.model == "LINKED" for d in ds), []))
    rng = random.Random(7)

    def fleet() -> UsageLedger:
        ledger = UsageLedger()
        for n in range(60):
            model = "LINKED" if n % 10 == 0 else "PLAIN"
            devices = [
                Device(vendor="scoped", id=f"n{n}-{i}", index=i, model=model, memory_mib=100)
                for i in range(4)
            ]
            ledger.set_node(f"n{n}", devices, cpu_milli=64_000)
        return ledger

    shared, alone = fleet(), fleet()
    placer = Placer(shared, policy, host=host)
    reference = Placer(alone, policy, host=host)
    reference.cache.keys.core_decides_somewhere = lambda request: False  # type: ignore[method-assign]
    worked: dict[str, int] = {"shared": 0, "alone": 0}

    def counting(which: str, answer: Any) -> Any:
        def counted(request: PodRequest, key: int, nodes: Any, **how: Any) -> Any:
            worked[which] += len(nodes)
            return answer(request, key, nodes, **how)

        return counted

    placer.cache.filler.answer = counting("shared", placer.cache.filler.answer)  # type: ignore[method-assign]
    reference.cache.filler.answer = counting("alone", reference.cache.filler.answer)  # type: ignore[method-assign]
    for step in range(120):
        limits = {"scoped.example.com/gpu": str(rng.choice([1, 1, 2]))}
        pod = PodView(
            ref=PodRef(name=f"p{step}"), containers=(ContainerView(name="c", limits=limits),)
        )
        names = rng.sample(sorted(shared.nodes), 30)
        got = placer.scores(placer.request(pod), names)
        want = reference.scores(reference.request(pod), names)
        assert got == want, step
        assert placer.filter(placer.request(pod), names).failed.keys() == (
            reference.filter(reference.request(pod), names).failed.keys()
        )
        plain = [n for n in got if n[1:].isdigit() and int(n[1:]) % 10]
        if plain and step % 2 == 0:  # book an idle device of a fitting node, on both fleets
            name = plain[0]
            idle = [d for d in shared.nodes[name].tables["scoped"].devices if d.used_slots == 0]
            if idle:
                piece = DeviceSlice(
                    device_id=idle[0].id, index=idle[0].index, memory_mib=10, compute_percent=0
                )
                one = ContainerAssignment(container="c", vendor="scoped", devices=(piece,))
                for ledger in (shared, alone):
                    ledger.add(f"b{step}", PodAssignment(node=name, containers=(one,)))
    assert worked["shared"] * 3 < worked["alone"], f"nodes in one state worked out once: {worked}"


@pytest.mark.parametrize("policy", ["fgd-cpu", "fgd", "binpack", "spread"])
def test_nodes_the_core_decides_get_the_verdicts_of_a_fit_and_score_of_each_node_alone(
    policy: str,
) -> None:
    """Where a vendor's own fit leaves nodes to the core, a one-container pod is answered
    on the shared path (table summaries, the policy's arrays, refusals walked per state)
    instead of a vendor fit and a device walk per node: each node still gets the verdict
    of :func:`fit_pod` with the vendor's fit and the policy's score of that node alone,
    refusal messages included, over random states and pod shapes, as the fleet fills."""
    import random

    from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
    from xpushare.scheduling import Workload, fit_pod

    rng = random.Random(11)
    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("scoped", _scoped_vendor(lambda ds: any(d.model == "LINKED" for d in ds), []))
    ledger = UsageLedger()
    for n in range(50):
        model = "LINKED" if n % 10 == 0 else rng.choice(("PLAIN", "SMALL"))
        size = 100 if model != "SMALL" else 40
        count = rng.choice((1, 2, 4, 8))
        devices = [
            Device(vendor="scoped", id=f"n{n}-{i}", index=i, model=model, memory_mib=size)
            for i in range(count)
        ]
        ledger.set_node(f"n{n}", devices, cpu_milli=rng.choice((8000, 32000)))
        pieces = []
        for d in devices:
            pct = rng.choice((0, 0, 25, 50, 75, 100))
            if pct:
                mem = size * pct // 100
                pieces.append(DeviceSlice(device_id=d.id, memory_mib=mem, compute_percent=pct))
        if pieces:
            one = ContainerAssignment(container="c", vendor="scoped", devices=tuple(pieces))
            ledger.add(f"old/n{n}", PodAssignment(node=f"n{n}", containers=(one,)))
    pods = _random_pods(rng, "scoped", "SMALL", 60)
    workload = Workload.from_requests(pods)
    engine = Placer(ledger, policy, host=host)
    engine.policy.set_workload(workload)
    names = list(ledger.nodes)
    for i, request in enumerate(pods):
        result = engine.filter(request, names)
        scores = engine.scores(request, result.fits)
        fitters = engine.vendors.fitters(request)
        reference = policy_registry().create(policy)  # scores one node at a time
        reference.attach(ledger)
        reference.set_workload(workload)
        for name in names:
            node = ledger.nodes[name]
            alone = fit_pod(node, request, custom=fitters)
            assert (name in result.fits) == alone.fits, (name, request.describe())
            if not alone.fits:
                assert result.failed[name] == alone.message(), (name, request.describe())
            elif not name.endswith("0"):  # the vendor's own nodes are scored as before
                node.memo = {}
                want = score_key(reference.score(node, request))
                assert scores[name] == want[: len(scores[name])], (name, request.describe())
        if scores:
            best = max(scores, key=lambda n: scores[n])
            engine.commit(f"p{i}", request, engine.decide(request, best))


@pytest.mark.parametrize("policy", ["fgd-cpu", "binpack"])
def test_select_over_the_fleet_reads_the_marked_nodes_answers(policy: str) -> None:
    """select() over the whole fleet (the simulator's call) with a vendor whose fit leaves
    most nodes to the core: those nodes keep their verdicts with their state's answers, not
    in their memo; select reads them there (it raised KeyError) and chooses the node the
    scores rank first, as the fleet fills."""
    from xpushare.scheduling import fit_pod

    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("scoped", _scoped_vendor(lambda ds: any(d.model == "LINKED" for d in ds), []))
    ledger = _scoped_fleet()
    placer = Placer(ledger, policy, host=host)
    placed = 0
    for step in range(12):
        request = placer.request(_scoped_pod(1 + step % 2))
        scores = placer.scores(request, list(ledger.nodes))
        chosen = placer.select(request)
        if not scores:
            assert chosen is None
            continue
        best = max(scores.values())
        assert chosen == next(n for n, k in scores.items() if k == best), step
        assert chosen is not None and fit_pod(ledger.nodes[chosen], request).fits
        placer.commit(f"p{step}", request, placer.decide(request, chosen))
        placed += 1
    assert placed >= 5


def test_nodes_the_core_decides_read_their_states_answers_and_vendor_fit_nodes_their_own() -> None:
    """For a vendor with its own fit, a node that fit leaves to the core reads its state's
    shared answer (a node not met before costs no work once its state was answered), while
    a node the vendor's fit decides never reads it, even in the very same state (here the
    vendor's fit takes the node by its devices' ids, which a state leaves out)."""
    asked: list[str] = []

    class ById:
        @hookimpl
        def xpushare_vendor(self) -> VendorSpec:
            return VendorSpec(
                name="scoped",
                api_version=API_VERSION,
                resource_names=ResourceNames(count="scoped.example.com/gpu"),
            )

        @hookimpl
        def xpushare_fit_applies(self, devices: Any) -> bool | None:
            return any(d.id.startswith("linked-") for d in devices)

        @hookimpl
        def xpushare_fit(self, request: ContainerRequest, node: Any) -> FitResult | None:
            asked.append(node.name)
            return FitResult(fits=False, reasons={FitReason.NOT_ENOUGH_FIT: 1})

    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("scoped", ById())
    ledger = UsageLedger()
    for name in [f"n{n}" for n in range(40)] + ["linked"]:
        devices = [
            Device(vendor="scoped", id=f"{name}-{i}", index=i, model="PLAIN", memory_mib=10)
            for i in range(2)
        ]
        ledger.set_node(name, devices)
    placer = Placer(ledger, "binpack", host=host)
    # Another shape first: each table is asked once whether the vendor's fit applies.
    assert list(placer.filter(placer.request(_scoped_pod(2)), list(ledger.nodes)).failed) == [
        "linked"
    ]
    request = placer.request(_scoped_pod(1))
    fills: list[int] = []
    fill = placer.cache.filler.fill
    placer.cache.filler.fill = lambda r, k, nodes: (fills.append(len(nodes)), fill(r, k, nodes))[1]  # type: ignore[method-assign]
    first = placer.filter(request, [f"n{n}" for n in range(20)])
    assert len(first.fits) == 20 and fills == [20]
    # Twenty nodes never asked, in the state answered: read, not worked out.
    assert len(placer.filter(request, [f"n{n}" for n in range(20, 40)]).fits) == 20
    assert fills == [20]
    # The vendor's node, first and last: refused by its fit, not given its state's answer.
    for names in (["linked", "n1", "n30"], ["n2", "n31", "linked"]):
        result = placer.filter(request, names)
        assert list(result.failed) == ["linked"] and len(result.fits) == 2
        assert placer.scores(request, names).keys() == set(names) - {"linked"}
    assert set(asked) == {"linked"}
    # A node whose inventory changes is asked again: n5 now has devices the vendor takes.
    devices = [
        Device(vendor="scoped", id=f"linked-n5-{i}", index=i, model="PLAIN", memory_mib=10)
        for i in range(2)
    ]
    ledger.set_node("n5", devices)
    assert list(placer.filter(request, ["n5", "n6"]).failed) == ["n5"]

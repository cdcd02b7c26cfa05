"""Per-pod policies: HAMi's policy annotations, the mutex policy, our policies per pod."""

from __future__ import annotations

from typing import Any

import pytest

from xpushare import hookimpl
from xpushare.models import (
    API_VERSION,
    ContainerRequest,
    ContainerView,
    Device,
    DeviceSlice,
    FitReason,
    FitResult,
    PodRef,
    PodView,
    ResourceNames,
    VendorSpec,
)
from xpushare.placement import Placer
from xpushare.placement.variants import MAX_POD_POLICIES
from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.plugins.builtin import mock as mock_plugin
from xpushare.scheduling import PodRequest, UsageLedger
from xpushare.scheduling.podpolicy import (
    GPU_POLICY_KEY,
    MAX_VALUE_CHARS,
    NODE_POLICY_KEY,
    WEIGHTS_KEY,
    HamiDeviceOrder,
    PodPolicy,
    parse_weights,
    pod_policy,
    policy_warnings,
)


def _host() -> PluginHost:
    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("mock", mock_plugin)
    return host


def _gpus(node: str, n: int, numa: list[int] | None = None) -> list[Device]:
    return [
        Device(
            vendor="mock",
            id=f"{node}-{i}",
            index=i,
            model="A100",
            memory_mib=1000,
            numa_node=numa[i] if numa else None,
        )
        for i in range(n)
    ]


def _fleet(
    host: PluginHost, numa: dict[str, list[int]] | None = None, **nodes: list[int]
) -> UsageLedger:
    """Nodes by name -> percent of memory and compute used on each GPU."""
    ledger = UsageLedger()
    for name, used in nodes.items():
        ledger.set_node(name, _gpus(name, len(used), (numa or {}).get(name)), cpu_milli=16000)
        placer = Placer(ledger, "binpack", host=host)
        for i, pct in enumerate(used):
            if pct:
                req = PodRequest.build(
                    [
                        ContainerRequest(
                            vendor="mock",
                            memory_percent=pct,
                            compute_percent=pct,
                            uuids_include=(f"{name}-{i}",),
                        )
                    ]
                )
                placer.commit(f"{name}/{i}", req, placer.decide(req, name))
    return ledger


def _pod(host: PluginHost, percent: int = 20, count: int = 1, **annotations: str) -> PodView:
    names = host.vendor("mock").spec.resource_names
    return PodView(
        ref=PodRef(name="p"),
        annotations=annotations,
        containers=(
            ContainerView(
                name="c",
                limits={
                    names.count: str(count),
                    str(names.memory_percent): str(percent),
                    str(names.compute): str(percent),
                },
            ),
        ),
    )


def _ann(
    node: str | None = None, gpu: str | None = None, weights: str | None = None
) -> dict[str, str]:
    out = {}
    if node is not None:
        out[NODE_POLICY_KEY] = node
    if gpu is not None:
        out[GPU_POLICY_KEY] = gpu
    if weights is not None:
        out[WEIGHTS_KEY] = weights
    return out


def _first_device(placer: Placer, pod: PodView, node: str) -> str:
    return placer.decide(placer.request(pod), node).containers[0].devices[0].device_id


# -- parsing ----------------------------------------------------------------------------------


def test_annotations_parse_to_a_pod_policy_and_none_without_them() -> None:
    assert pod_policy({"other": "x"}) is None
    choice = pod_policy(_ann("spread", " mutex , binpack,,numa ", "slot=1, core=0 ,memory=3"))
    assert choice == PodPolicy(node="spread", device="mutex,binpack,numa", weights=(1, 0, 3))
    assert choice.mutex and not choice.topology
    assert pod_policy(_ann(gpu="topology-aware")).topology  # type: ignore[union-attr]
    # A comma keeps HAMi's chain mode (its ties go by index, not by NUMA).
    one = pod_policy(_ann(gpu=" binpack , "))
    assert one is not None and one.device == "binpack,"
    assert HamiDeviceOrder(one.device).chained and not HamiDeviceOrder("binpack").chained
    assert policy_warnings(_ann(gpu="binpack,"), ["binpack"]) == []


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("slot=1,core=1", "exactly"),
        ("slot=1,core=1,memory=1,slot=2", "exactly"),
        ("slot=1,core=1,gpu=1", "'gpu' is not a weight"),
        ("slot=1,slot=1,memory=1", "slot is given twice"),
        ("slot=1,core=x,memory=1", "core must be an integer"),
        ("slot=1,core=1.5,memory=1", "core must be an integer"),
        ("slot=-1,core=1,memory=1", "slot must not be negative"),
        ("slot=0,core=0,memory=0", "at least one weight"),
        ("slot=1,core=1,memory=99999999999", "above 1,000,000"),
        ("slot=1,core=1,memory=" + "9" * 40, "must be an integer"),
    ],
)
def test_bad_weights_are_refused_naming_the_annotation(value: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as err:
        parse_weights(value)
    assert WEIGHTS_KEY in str(err.value)


def test_overlong_values_are_refused_before_they_are_split() -> None:
    for key in (NODE_POLICY_KEY, GPU_POLICY_KEY, WEIGHTS_KEY):
        with pytest.raises(ValueError, match=f"{key} is {MAX_VALUE_CHARS + 1} characters"):
            pod_policy({key: "," * (MAX_VALUE_CHARS + 1)})


def test_the_webhook_warnings_name_what_hami_ignores() -> None:
    known = ["binpack", "spread", "fgd"]
    assert policy_warnings(_ann("fgd", "binpack,numa"), known) == []
    [node] = policy_warnings(_ann("packed"), known)
    assert NODE_POLICY_KEY in node and "'packed'" in node and "binpack, as in HAMi" in node
    [gpu] = policy_warnings(_ann(gpu="binpack,closest,mutex"), known)
    assert GPU_POLICY_KEY in gpu and "'closest'" in gpu


def test_a_pod_with_bad_weights_is_refused_when_parsed() -> None:
    host = _host()
    placer = Placer(UsageLedger(), "binpack", host=host)
    with pytest.raises(ValueError, match=f"pod default/p: annotation {WEIGHTS_KEY}"):
        placer.request(_pod(host, **_ann(weights="slot=1")))


# -- node policy per pod ----------------------------------------------------------------------


def test_a_pod_chooses_its_node_policy_among_the_registered_ones() -> None:
    host = _host()
    ledger = _fleet(host, empty=[0, 0], half=[50, 50], busy=[80, 0])
    placer = Placer(ledger, "binpack", host=host)
    assert placer.select(placer.request(_pod(host))) == "half"
    assert placer.select(placer.request(_pod(host, **_ann("spread")))) == "empty"
    assert placer.select(placer.request(_pod(host, **_ann("best-fit")))) == "half"
    # prioritize and filter answer for the pod's policy as well.
    scores = placer.prioritize(placer.request(_pod(host, **_ann("spread"))))
    assert scores["empty"] == 100.0 and scores["half"] < 100.0
    # A name HAMi does not know and no plugin registered: binpack, as HAMi takes it.
    assert placer.select(placer.request(_pod(host, **_ann("no-such")))) == "half"


def test_a_pod_choice_builds_one_placer_and_the_cluster_choice_none() -> None:
    host = _host()
    ledger = _fleet(host, a=[0, 0])
    placer = Placer(ledger, "binpack", host=host)
    spread = placer.request(_pod(host, **_ann("spread")))
    assert placer.for_request(spread) is placer.for_request(
        placer.request(_pod(host, **_ann("spread")))
    )
    assert placer.for_request(spread) is not placer
    assert placer.for_request(placer.request(_pod(host, **_ann("binpack")))) is placer
    assert placer.for_request(placer.request(_pod(host))) is placer
    # Weights make the choices unbounded: the placers kept are bounded.
    for w in range(1, MAX_POD_POLICIES + 10):
        placer.for_request(placer.request(_pod(host, **_ann(weights=f"slot={w},core=1,memory=1"))))
    assert len(placer.variants.placers) <= MAX_POD_POLICIES


def test_a_learning_policy_learns_from_pods_that_chose_another() -> None:
    host = _host()
    ledger = _fleet(host, a=[0, 0])
    placer = Placer(ledger, "binpack", host=host)
    seen: list[PodRequest] = []
    spread = placer.request(_pod(host, **_ann("spread")))
    variant = placer.for_request(spread)
    variant.policy.observe = seen.append  # type: ignore[method-assign]
    placer.filter(placer.request(_pod(host)), ["a"])
    assert len(seen) == 1


# -- GPU policy per pod -------------------------------------------------------------------------


def test_a_pod_chooses_its_device_order_as_hami_sorts() -> None:
    host = _host()
    ledger = _fleet(host, n=[0, 60, 30])
    for cluster in ("binpack", "spread", "fgd-cpu"):
        placer = Placer(ledger, cluster, host=host)
        assert _first_device(placer, _pod(host, **_ann(gpu="binpack")), "n") == "n-1"
        assert _first_device(placer, _pod(host, **_ann(gpu="spread")), "n") == "n-0"
        # topology-aware, an unknown token and an empty chain sort as spread, as HAMi does.
        assert _first_device(placer, _pod(host, **_ann(gpu="topology-aware")), "n") == "n-0"
        assert _first_device(placer, _pod(host, **_ann(gpu="closest,")), "n") == "n-0"


def test_equal_devices_are_tried_from_the_highest_index_as_hamis_walk_from_the_end() -> None:
    host = _host()
    ledger = _fleet(host, n=[0, 0, 0])
    placer = Placer(ledger, "binpack", host=host)
    assert _first_device(placer, _pod(host, **_ann(gpu="binpack")), "n") == "n-2"
    assert _first_device(placer, _pod(host), "n") == "n-0"  # the cluster's own order


def test_a_numa_chain_sorts_by_the_keys_in_the_order_written() -> None:
    host = _host()
    numa = {"n": [0, 0, 1, 1]}
    ledger = _fleet(host, numa, n=[50, 0, 0, 20])
    placer = Placer(ledger, "binpack", host=host)
    # binpack first: the fullest device, whatever its NUMA node.
    assert _first_device(placer, _pod(host, **_ann(gpu="binpack,numa")), "n") == "n-0"
    # numa first: HAMi's walk meets the highest NUMA node first, then packs inside it.
    assert _first_device(placer, _pod(host, **_ann(gpu="numa,binpack")), "n") == "n-3"
    assert _first_device(placer, _pod(host, **_ann(gpu="numa,spread")), "n") == "n-2"


def test_weights_decide_which_term_of_the_device_score_counts() -> None:
    host = _host()
    ledger = UsageLedger()
    ledger.set_node("n", _gpus("n", 2), cpu_milli=16000)
    base = Placer(ledger, "binpack", host=host)
    heavy_memory = ContainerRequest(
        vendor="mock", memory_percent=60, compute_percent=0, uuids_include=("n-0",)
    )
    heavy_compute = ContainerRequest(
        vendor="mock", memory_percent=5, compute_percent=70, uuids_include=("n-1",)
    )
    for i, req in enumerate((heavy_memory, heavy_compute)):
        r = PodRequest.build([req])
        base.commit(f"x{i}", r, base.decide(r, "n"))
    memory = _ann(gpu="binpack", weights="slot=0,core=0,memory=1")
    compute = _ann(gpu="binpack", weights="slot=0,core=1,memory=0")
    assert _first_device(base, _pod(host, 10, **memory), "n") == "n-0"
    assert _first_device(base, _pod(host, 10, **compute), "n") == "n-1"
    order = HamiDeviceOrder("binpack", (0, 1, 0))
    assert "weights=(0, 1, 0)" in repr(order)


# -- mutex ---------------------------------------------------------------------------------------


def test_mutex_keeps_the_pod_off_devices_in_use() -> None:
    host = _host()
    ledger = _fleet(host, n=[60, 30, 0], full=[10, 10])
    placer = Placer(ledger, "binpack", host=host)
    mutex = _pod(host, **_ann(gpu="mutex"))
    request = placer.request(mutex)
    assert _first_device(placer, mutex, "n") == "n-2"
    result = placer.filter(request, ["n", "full"])
    assert result.fits == ["n"]
    assert FitReason.EXCLUSIVE_CONFLICT.value in result.failed["full"]
    # It books what it asked, not the whole device: a plain pod may still share it...
    placer.commit("m", request, placer.decide(request, "n"))
    plain = placer.request(_pod(host, 20))
    assert placer.filter(plain, ["n"]).fits == ["n"]
    # ...but a second mutex pod finds no idle device left.
    assert placer.filter(placer.request(mutex), ["n"]).fits == []
    # In a chain too, and for two devices of one container.
    assert placer.filter(placer.request(_pod(host, **_ann(gpu="binpack,mutex"))), ["n"]).fits == []


def test_mutex_two_devices_need_two_idle_ones() -> None:
    host = _host()
    ledger = _fleet(host, a=[0, 10, 0], b=[0, 10, 10])
    placer = Placer(ledger, "binpack", host=host)
    request = placer.request(_pod(host, count=2, **_ann(gpu="mutex,binpack")))
    assert placer.filter(request, ["a", "b"]).fits == ["a"]
    picked = {d.device_id for d in placer.decide(request, "a").containers[0].devices}
    assert picked == {"a-0", "a-2"}


def _lowest_free_vendor() -> object:
    class Lowest:
        """A vendor with its own fit: the lowest-index device with a free share slot."""

        @hookimpl
        def xpushare_vendor(self) -> VendorSpec:
            return VendorSpec(
                name="lowest",
                api_version=API_VERSION,
                resource_names=ResourceNames(count="lowest.example.com/gpu"),
            )

        @hookimpl
        def xpushare_fit(self, request: ContainerRequest, node: Any, usage: Any) -> FitResult:
            for d in sorted(node.devices, key=lambda d: d.index):
                if usage[d.id].used_slots < d.share_slots:
                    return FitResult(
                        fits=True,
                        devices=(
                            DeviceSlice(
                                device_id=d.id, index=d.index, memory_mib=1, compute_percent=1
                            ),
                        ),
                    )
            return FitResult(fits=False, reasons={FitReason.SLOTS_EXHAUSTED: len(node.devices)})

    return Lowest()


def test_a_vendor_with_its_own_fit_sees_used_devices_as_full_under_mutex() -> None:
    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("lowest", _lowest_free_vendor())
    ledger = UsageLedger()
    ledger.set_node(
        "n",
        [Device(vendor="lowest", id=f"l{i}", index=i, model="L", memory_mib=10) for i in range(2)],
    )
    placer = Placer(ledger, "binpack", host=host)

    def pod(**annotations: str) -> PodView:
        return PodView(
            ref=PodRef(name="x"),
            annotations=annotations,
            containers=(ContainerView(name="c", limits={"lowest.example.com/gpu": "1"}),),
        )

    first = placer.request(pod())
    placer.commit("a", first, placer.decide(first, "n"))
    assert _first_device(placer, pod(), "n") == "l0"
    assert _first_device(placer, pod(**_ann(gpu="mutex")), "n") == "l1"


# -- HAMi's request defaults ----------------------------------------------------------------


def test_default_memory_cores_and_memory_factor_apply_to_every_parse() -> None:
    from xpushare.placement import PlacementConfig
    from xpushare.placement.config import RequestDefaults

    host = _host()
    names = host.vendor("mock").spec.resource_names
    config = PlacementConfig(
        policy="binpack",
        request_defaults={
            "*": RequestDefaults(default_memory_mib=3000, default_compute_percent=25),
            "mock": RequestDefaults(
                default_memory_mib=2000, default_compute_percent=30, memory_factor=1024
            ),
        },
    )
    placer = Placer(UsageLedger(), host=host, config=config)

    def demand(**limits: str) -> Any:
        view = PodView(ref=PodRef(name="p"), containers=(ContainerView(name="c", limits=limits),))
        [d] = placer.request(view).demands
        return d

    only_count = demand(**{names.count: "1"})
    assert (only_count.memory_mib, only_count.compute) == (2000, 30)
    given = demand(**{names.count: "1", str(names.memory): "8", str(names.compute): "10"})
    assert (given.memory_mib, given.compute) == (8 * 1024, 10)
    percent = demand(**{names.count: "1", str(names.memory_percent): "50"})
    assert (percent.memory_mib, percent.memory_percent) == (None, 50)
    # The webhook's host is the placer's: it parses alike; applying again changes nothing.
    host.apply_request_defaults(config.request_defaults)
    assert host.vendor("mock").spec.memory_unit_mib == 1024
    with pytest.raises(ValueError, match="less than or equal to 100"):
        RequestDefaults(default_compute_percent=101)


def test_node_policies_nobody_registered_share_the_binpack_placer() -> None:
    host = _host()
    ledger = _fleet(host, a=[0, 0])
    placer = Placer(ledger, "spread", host=host)
    first = placer.for_request(placer.request(_pod(host, **_ann("nope-1"))))
    second = placer.for_request(placer.request(_pod(host, **_ann("nope-2"))))
    binpack = placer.for_request(placer.request(_pod(host, **_ann("binpack"))))
    assert first is second is binpack and first.policy.name == "binpack"

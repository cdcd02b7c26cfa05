"""Namespace quotas on device memory and compute: reading ResourceQuotas, what a pod books."""

from __future__ import annotations

import pytest

from xpushare.models import ContainerRequest, Device, PodRef
from xpushare.scheduling import PodRequest, UsageLedger
from xpushare.scheduling.quota import MAX_HARD_KEYS, QuotaBook, QuotaResource, pod_booking

MEM, CORES = "nvidia.com/gpumem", "nvidia.com/gpucores"


def book(unit: int = 1) -> QuotaBook:
    return QuotaBook(
        {MEM: QuotaResource("nvidia", "memory", unit), CORES: QuotaResource("nvidia", "compute")}
    )


def ask(*containers: ContainerRequest, init: tuple[ContainerRequest, ...] = ()) -> PodRequest:
    return PodRequest.build(containers, init=init, pod=PodRef(namespace="team", name="p"))


def gpu(**kw: object) -> ContainerRequest:
    return ContainerRequest(vendor="nvidia", **kw)  # type: ignore[arg-type]


def test_caps_are_read_from_both_prefixes_and_the_lowest_applies() -> None:
    quotas = book(unit=2)
    assert quotas.set("team", "a", {f"limits.{MEM}": "10000", "requests.cpu": "4"}) == []
    assert quotas.set("team", "b", {f"requests.{MEM}": "4000", f"limits.{CORES}": "150"}) == []
    assert quotas.set("team", "plain", {MEM: "1"}) == []  # no prefix: not a quota key
    caps = {(c.quota, c.key): c.limit for c in quotas.limits("team")}
    # Memory caps count the resource's units (HAMi's memoryFactor): 4000 x 2 MiB.
    assert caps == {
        ("a", f"limits.{MEM}"): 20000,
        ("b", f"requests.{MEM}"): 8000,
        ("b", f"limits.{CORES}"): 150,
    }
    request = ask(gpu(memory_mib=5000, compute_percent=20))
    assert quotas.refusal(request, "team", {"nvidia": (2000, 0)}) is None
    why = quotas.refusal(request, "team", {"nvidia": (4000, 0)})
    assert why == (
        f"namespace team: ResourceQuota b caps requests.{MEM} at 4000 (8000 MiB); its pods book "
        "4000 MiB and this pod asks 5000 MiB more"
    )
    assert "caps limits.nvidia.com/gpucores at 150" in quotas.refusal(
        request, "team", {"nvidia": (0, 140)}
    )
    assert quotas.refusal(request, "elsewhere", {"nvidia": (10**6, 10**6)}) is None
    quotas.remove("team", "b")
    assert quotas.refusal(request, "team", {"nvidia": (4000, 140)}) is None
    # A zero cap blocks every booking of it, as in HAMi; a request booking none passes.
    quotas.set("zero", "q", {f"limits.{CORES}": "0"})
    assert quotas.refusal(request, "zero", {}) is not None
    assert quotas.refusal(ask(gpu(memory_mib=1)), "zero", {}) is None


def test_unreadable_values_are_reported_and_the_rest_enforced() -> None:
    quotas = book()
    problems = quotas.set("team", "q", {f"limits.{MEM}": "lots", f"limits.{CORES}": "100"})
    assert len(problems) == 1 and "ResourceQuota team/q" in problems[0] and "'lots'" in problems[0]
    assert [c.key for c in quotas.limits("team")] == [f"limits.{CORES}"]
    assert "ResourceQuota team/big" in quotas.set("team", "big", {f"limits.{MEM}": "1e999999"})[0]
    # Bounded: only the first MAX_HARD_KEYS entries are read; odd shapes read as no caps.
    many = {f"limits.x{i}": "1" for i in range(MAX_HARD_KEYS)} | {f"limits.{MEM}": "1"}
    quotas.set("wide", "q", many)
    assert quotas.limits("wide") == ()
    assert quotas.set("odd", "q", ["not", "a", "map"]) == [] and quotas.limits("odd") == ()
    quotas.replace([("fresh", "q", {f"limits.{MEM}": "5"})])
    assert quotas.limits("team") == () and len(quotas) == 1


def test_what_a_pod_books_follows_the_ledger_collapse() -> None:
    ledger = UsageLedger()
    ledger.set_node(
        "n",
        [
            Device(vendor="nvidia", id=f"g{i}", index=i, model="A", memory_mib=80000)
            for i in range(2)
        ],
    )
    table = ledger.node("n").tables["nvidia"]  # type: ignore[union-attr]
    # Two app containers add up; the init container counts only past their sum.
    request = ask(
        gpu(count=2, memory_mib=1000, compute_percent=10),
        gpu(memory_percent=25, compute_percent=5),
        init=(gpu(memory_mib=50000),),
    )
    assert pod_booking(request, "nvidia", table) == (50000, 25)
    assert pod_booking(ask(gpu(memory_percent=25)), "nvidia", table) == (20000, 0)
    assert pod_booking(ask(gpu(count=1, compute_percent=100, exclusive=True)), "nvidia", table) == (
        80000,
        100,
    )
    assert pod_booking(ask(gpu(memory_percent=25)), "nvidia", None) == (0, 0)
    quotas = book()
    quotas.set("team", "q", {f"limits.{MEM}": "30000"})
    percent = ask(gpu(memory_percent=50))
    assert quotas.needs_node(percent, "team") and not quotas.needs_node(
        ask(gpu(memory_mib=1)), "team"
    )
    assert quotas.refusal(percent, "team", {}, {"nvidia": table}) is not None  # 40000 MiB here


@pytest.mark.parametrize("sign", [1, -1])
def test_the_ledger_counts_each_namespace(sign: int) -> None:
    from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment

    ledger = UsageLedger()
    ledger.set_node("n", [Device(vendor="nvidia", id="g0", index=0, model="A", memory_mib=80000)])
    slice_ = DeviceSlice(device_id="g0", index=0, memory_mib=3000, compute_percent=30)
    assignment = PodAssignment(
        node="n",
        containers=(ContainerAssignment(container="c", vendor="nvidia", devices=(slice_,)),),
    )
    ledger.add("a", assignment, namespace="team")
    ledger.reserve("b", assignment, namespace="team")
    ledger.add("c", assignment, namespace="other")
    assert ledger.namespace_usage("team") == {"nvidia": (6000, 60)}
    assert ledger.namespaces() == ["other", "team"]
    ledger.remove("a" if sign > 0 else "b")
    ledger.release("b")
    assert ledger.namespace_usage("team") == ({} if sign > 0 else {"nvidia": (3000, 30)})


def test_the_quotas_kept_are_bounded_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    from xpushare.scheduling import quota

    monkeypatch.setattr(quota, "MAX_QUOTAS", 3)
    quotas = book()
    for i in range(3):
        assert quotas.set(f"ns{i}", "q", {f"limits.{MEM}": "1"}) == []
    [refused] = quotas.set("ns9", "q", {f"limits.{MEM}": "1"})
    assert "more than 3 quotas" in refused and quotas.limits("ns9") == ()
    quotas.set("ns0", "q", {f"limits.{MEM}": "2"})  # a change of a kept one is taken
    assert [c.limit for c in quotas.limits("ns0")] == [2] and len(quotas) == 3
    quotas.set("ns1", "q", {"requests.cpu": "1"})  # no device cap left: dropped
    quotas.remove("ns2", "q")
    quotas.remove("ns2", "q")
    assert len(quotas) == 1

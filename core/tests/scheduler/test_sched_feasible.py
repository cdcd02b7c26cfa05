"""/filter's feasibility pass answers exactly what the core's fit answers, node by node.

It shares device answers between nodes in one device state, and checks a pod's CPU and host
memory per node first (so pods that ask for them share too): both must be invisible in the
answers, whatever the mix of full, partly used and CPU-starved nodes.
"""

from __future__ import annotations

import random

from xpushare.models import (
    ContainerAssignment,
    ContainerRequest,
    Device,
    DeviceSlice,
    PodAssignment,
)
from xpushare.placement import Placer
from xpushare.scheduler.feasible import FeasibilityChecker
from xpushare.scheduling import PodRequest, UsageLedger, fit_pod


def fleet() -> UsageLedger:
    rng = random.Random(3)
    ledger = UsageLedger()
    for n in range(40):
        name = f"n{n}"
        devices = [
            Device(vendor="acme", id=f"{name}-{i}", index=i, model="A100", memory_mib=40_000)
            for i in range(4)
        ]
        ledger.set_node(name, devices, cpu_milli=rng.choice([2_000, 8_000, 32_000]))
        for i in range(rng.randrange(0, 5)):  # 0-4 devices a quarter to fully used
            pct = rng.choice([25, 50, 100])
            piece = DeviceSlice(
                device_id=f"{name}-{i}", index=i, memory_mib=400 * pct, compute_percent=pct
            )
            container = ContainerAssignment(container="c", vendor="acme", devices=(piece,))
            ledger.add(
                f"{name}/{i}",
                PodAssignment(node=name, containers=(container,)),
                cpu_milli=rng.choice([0, 1_000, 6_000]),
            )
    return ledger


def test_shared_answers_and_host_checks_give_the_fit_of_each_node() -> None:
    ledger = fleet()
    checker = FeasibilityChecker(Placer(ledger, "binpack"))
    names = list(ledger.nodes)
    rng = random.Random(5)
    for _ in range(300):
        request = PodRequest.build(
            [
                ContainerRequest(
                    vendor="acme",
                    count=rng.choice([1, 1, 2]),
                    memory_mib=rng.randrange(1_000, 40_000),
                    compute_percent=rng.choice([0, 10, 50]),
                )
            ],
            cpu_milli=rng.choice([0, 0, 500, 4_000, 16_000]),
            memory_mib=rng.choice([0, 1_000]),
        )
        got = checker.check(request, names)
        for name in names:
            fit = fit_pod(ledger.nodes[name], request)
            if fit.fits:
                assert name in got.fits
            else:
                assert got.failed[name] == fit.message()
                assert got.reasons[name] == fit.primary()


def test_answers_follow_every_change_of_a_node() -> None:
    """The one-vendor path keys answers by the device table's state id: a node that changes
    between two checks must be answered from its new state, never from a remembered one."""
    ledger = fleet()
    ledger.set_node("other", [Device(vendor="zeta", id="z0", index=0, model="Z", memory_mib=1)])
    checker = FeasibilityChecker(Placer(ledger, "binpack"))
    names = [*ledger.nodes, "ghost"]
    rng = random.Random(11)
    added = 0
    for step in range(400):
        request = PodRequest.build(
            [
                ContainerRequest(
                    vendor="acme",
                    count=1,
                    memory_mib=rng.choice([4_000, 10_000, 20_000, 39_000]),
                    compute_percent=rng.choice([0, 25]),
                )
            ]
        )
        got = checker.check(request, names)
        assert got.failed["ghost"] and "other" in got.failed
        for name in names[:-1]:
            fit = fit_pod(ledger.nodes[name], request)
            assert (name in got.fits) == fit.fits, (step, name)
            if not fit.fits:
                assert got.failed[name] == fit.message()
        if got.fits and step % 3 == 0:  # take part of a node that fitted: it must change
            name = rng.choice(got.fits)
            state = ledger.nodes[name]
            device = next(
                d
                for d in state.tables["acme"].devices
                if d.usable and d.memory_cap - d.used_memory >= 4_000
            )
            piece = DeviceSlice(
                device_id=device.id, index=device.index, memory_mib=4_000, compute_percent=0
            )
            container = ContainerAssignment(container="c", vendor="acme", devices=(piece,))
            ledger.add(f"new-{added}", PodAssignment(node=name, containers=(container,)))
            added += 1
    assert added > 50


def test_a_vendor_fit_that_applies_to_some_nodes_is_asked_there_only() -> None:
    """/filter for a vendor with its own fit: the core answers the nodes the vendor said its
    fit leaves to the default (``xpushare_fit_applies``), the vendor the others; the answers
    are the placer's, node by node, as the fleet changes."""
    from typing import Any

    from xpushare import API_VERSION, hookimpl
    from xpushare.models import FitReason, FitResult, ResourceNames, VendorSpec
    from xpushare.plugins import HostSettings, PluginHost
    from xpushare.plugins.builtin import CORE_PLUGINS

    asked: list[str] = []

    class Scoped:
        @hookimpl
        def xpushare_vendor(self) -> VendorSpec:
            return VendorSpec(
                name="acme", api_version=API_VERSION, resource_names=ResourceNames(count="a/gpu")
            )

        @hookimpl
        def xpushare_fit_applies(self, devices: Any) -> bool:
            return any(d.model == "LINKED" for d in devices)

        @hookimpl
        def xpushare_fit(self, request: ContainerRequest, node: Any) -> FitResult | None:
            asked.append(node.name)
            if request.memory_mib and request.memory_mib > 20_000:
                return FitResult(fits=False, reasons={FitReason.NOT_ENOUGH_FIT: 1})
            return None

    host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    host.register("acme", Scoped())
    ledger = fleet()
    for n in range(3):  # three nodes the vendor decides on
        ledger.set_node(
            f"linked{n}",
            [
                Device(vendor="acme", id=f"l{n}-{i}", index=i, model="LINKED", memory_mib=40_000)
                for i in range(4)
            ],
        )
    checker = FeasibilityChecker(Placer(ledger, "binpack", host=host))
    names = [*ledger.nodes, "ghost"]
    rng = random.Random(2)
    for step in range(120):
        request = PodRequest.build(
            [ContainerRequest(vendor="acme", count=1, memory_mib=rng.randrange(1_000, 40_000))],
            cpu_milli=rng.choice([0, 0, 1_000, 6_000]),
        )
        asked.clear()
        got = checker.check(request, names)
        assert set(asked) <= {"linked0", "linked1", "linked2"}
        reference = Placer(ledger, "binpack", host=host).filter(request, names)
        assert got.fits == reference.fits, step
        assert got.failed == reference.failed, step
        if got.fits:
            name = rng.choice(got.fits)
            state = ledger.nodes[name]
            device = next(d for d in state.tables["acme"].devices if d.usable)
            piece = DeviceSlice(
                device_id=device.id, index=device.index, memory_mib=1_000, compute_percent=0
            )
            container = ContainerAssignment(container="c", vendor="acme", devices=(piece,))
            ledger.add(f"s{step}", PodAssignment(node=name, containers=(container,)))


def test_the_candidate_rows_follow_nodes_added_changed_and_removed() -> None:
    """Calls of 32 candidates or more are answered from per-node arrays kept in step with the
    ledger (scheduler/candidates.py): after any change (a pod added or gone, a node removed,
    re-registered with other devices or new) each answer is still the fit of the node as it
    is now, its CPU and host memory included, and the small calls (node by node) agree."""
    ledger = fleet()
    checker = FeasibilityChecker(Placer(ledger, "binpack"))
    rng = random.Random(29)
    born = 0

    def devices(name: str, memory: int) -> list[Device]:
        return [
            Device(vendor="acme", id=f"{name}-{i}", index=i, model="A100", memory_mib=memory)
            for i in range(rng.choice([1, 2, 4]))
        ]

    for step in range(300):
        request = PodRequest.build(
            [
                ContainerRequest(
                    vendor="acme",
                    memory_mib=rng.choice([4_000, 20_000, 39_000, 70_000]),
                    compute_percent=rng.choice([0, 50]),
                )
            ],
            cpu_milli=rng.choice([0, 1_000, 7_000]),
            memory_mib=rng.choice([0, 0, 4_096]),
        )
        names = [*ledger.nodes, "ghost", "n3"]  # a duplicate: answered like the first
        rng.shuffle(names)
        got = checker.check(request, names)
        small = [checker.check(request, names[i : i + 8]) for i in range(0, len(names), 8)]
        assert got.fits == [n for part in small for n in part.fits], step
        for name in names:
            state = ledger.nodes.get(name)
            if state is None:
                assert name not in got.fits and got.failed[name]
                continue
            fit = fit_pod(state, request)
            assert (name in got.fits) == fit.fits, (step, name)
            if not fit.fits:
                assert got.failed[name] == fit.message(), (step, name)
        change = rng.random()
        victim = rng.choice(sorted(ledger.nodes))
        if change < 0.3:
            ledger.remove_node(victim)
        elif change < 0.5:
            ledger.set_node(victim, devices(victim, 80_000), cpu_milli=rng.choice([None, 4_000]))
        elif change < 0.7:
            ledger.set_node(f"new{born}", devices(f"new{born}", 40_000), memory_mib=8_192)
            born += 1
        elif got.fits:
            name = rng.choice(got.fits)
            device = next(iter(ledger.nodes[name].tables["acme"].devices))
            piece = DeviceSlice(
                device_id=device.id, index=device.index, memory_mib=1_000, compute_percent=0
            )
            container = ContainerAssignment(container="c", vendor="acme", devices=(piece,))
            ledger.add(
                f"pod-{step}", PodAssignment(node=name, containers=(container,)), cpu_milli=2_000
            )
    rows = checker.rows()
    assert born > 20 and len(rows.rows) > 60, "the rows grew with the fleet"


def test_a_name_no_row_has_is_unknown_whatever_the_fleet_size() -> None:
    """A name the ledger does not know reads the rows' spare last row (numpy's index -1):
    it must never be a node's, also when the fleet fills the arrays' capacity exactly."""
    for size in (0, 1, 1_023, 1_024, 1_025):
        ledger = UsageLedger()
        checker = FeasibilityChecker(Placer(ledger, "binpack"))
        checker.rows()  # rows made before the nodes: they grow as nodes come
        for n in range(size):
            device = Device(vendor="acme", id=f"n{n}-0", index=0, model="A100", memory_mib=8_000)
            ledger.set_node(f"n{n}", [device])
        request = PodRequest.build([ContainerRequest(vendor="acme", memory_mib=1_000)])
        names = [f"n{n}" for n in range(size)] + ["ghost"] * 40
        got = checker.check(request, names)
        assert got.fits == names[:size], size
        assert set(got.failed) == {"ghost"} and got.reasons["ghost"] is not None, size

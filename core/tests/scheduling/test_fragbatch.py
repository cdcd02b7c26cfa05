"""The batch search on arrays gives the scalar search's answers, bit for bit.

Random fleets (device sizes, models, health, share slots, partial and exclusive usage, CPU
and memory left, a second vendor on some nodes) and random workloads; every pod the batch
search handles is measured both ways on every node, and the answers must be equal, not
close: the engine mixes the two paths and compares scores for equality.
"""

from __future__ import annotations

import random

import pytest

from xpushare.models import (
    ContainerAssignment,
    ContainerRequest,
    Device,
    DeviceSlice,
    PodAssignment,
)
from xpushare.scheduling import FragmentationPolicy, PodRequest, UsageLedger, Workload
from xpushare.scheduling.fit import check_device, sig_booked, sig_can_host
from xpushare.scheduling.fragbatch import batch_demand, search
from xpushare.scheduling.fragmentation import BATCH_MIN
from xpushare.scheduling.hostaware import FgdCpuPolicy
from xpushare.scheduling.partitions import geometry_of, slot_name
from xpushare.scheduling.request import Demand
from xpushare.scheduling.state import (
    DeviceState,
    NodeState,
    booked_signature,
    cached_signature,
    device_signature,
)
from xpushare.testing.partitions import A100_80GB, profiles

MODELS = ("A100", "T4", "V100")
P80 = profiles(A100_80GB)


def mig_devices(rng: random.Random, name: str) -> list[Device]:
    """A100-80GBs in dynamic MIG mode; some nodes also have a shared GPU of the vendor."""
    devices = [
        Device(
            vendor="acme",
            id=f"{name}-{i}",
            index=i,
            model="A100-SXM4-80GB",
            memory_mib=81920,
            share_slots=7,
            healthy=rng.random() > 0.05,
            numa_node=i % 2,
            mode="mig",
            partitions=P80,
        )
        for i in range(rng.choice((1, 2, 4, 8)))
    ]
    if rng.random() < 0.2:
        devices.append(
            Device(vendor="acme", id=f"{name}-s", index=9, model="A100", memory_mib=81920)
        )
    return devices


def random_layout(rng: random.Random, d: Device) -> list[DeviceSlice]:
    """Instances at random free placements (not only where the fit would put them: a 1g at
    slice 0 is a layout a GPU can be left in), as the fit books them."""
    geometry = geometry_of(d.partitions)
    assert geometry is not None
    booked: list[str] = []
    out: list[DeviceSlice] = []
    for _ in range(rng.choice((0, 1, 2, 3, 5, 7))):
        occ = geometry.occupancy(booked)
        options = [(s, start) for s in geometry.shapes for start in geometry.free_starts(s, occ)]
        if not options:
            break
        shape, start = rng.choice(options)
        booked.append(slot_name(shape.name, start))
        out.append(
            DeviceSlice(
                device_id=d.id,
                memory_mib=shape.memory_mib,
                compute_percent=shape.compute_percent,
                partition=booked[-1],
            )
        )
    return out


def random_fleet(rng: random.Random, nodes: int, uniform: bool, mig: bool = False) -> UsageLedger:
    """A random fleet; with *mig*, half the nodes have GPUs in dynamic MIG mode."""
    ledger = UsageLedger()
    for n in range(nodes):
        name = f"n{n}"
        model = rng.choice(MODELS)
        if mig and rng.random() < 0.5:
            devices = mig_devices(rng, name)
            ledger.set_node(
                name, devices, cpu_milli=rng.choice((None, 16000, 64000)), memory_mib=None
            )
            containers = [
                ContainerAssignment(container=f"c{d.index}-{k}", vendor="acme", devices=(s,))
                for d in devices
                if d.mode == "mig" and d.healthy
                for k, s in enumerate(random_layout(rng, d))
            ]
            if containers:
                ledger.add(
                    f"p/{name}",
                    PodAssignment(node=name, containers=tuple(containers)),
                    cpu_milli=rng.choice((0, 4000, 12000)),
                )
            continue
        devices = [
            Device(
                vendor="acme",
                id=f"{name}-{i}",
                index=i,
                model=model,
                memory_mib=1000 if uniform else rng.choice((1000, 2000)),
                share_slots=rng.choice((2, 4, 10)),
                healthy=rng.random() > 0.05,
                numa_node=i % 2,
            )
            for i in range(rng.choice((1, 2, 4, 8)))
        ]
        if rng.random() < 0.2:
            devices.append(
                Device(vendor="other", id=f"{name}-o", index=0, model="X", memory_mib=500)
            )
        ledger.set_node(
            name,
            devices,
            cpu_milli=rng.choice((None, 16000, 64000)),
            memory_mib=rng.choice((None, 65536)),
        )
        containers = []
        for d in devices:
            if d.vendor != "acme" or not d.healthy or rng.random() < 0.3:
                continue
            for c in range(rng.choice((1, 1, 2))):
                if rng.random() < 0.15:
                    s = DeviceSlice(
                        device_id=d.id, memory_mib=d.memory_mib, compute_percent=100, exclusive=True
                    )
                else:
                    pct = rng.choice((10, 25, 40, 50, 70))
                    s = DeviceSlice(
                        device_id=d.id, memory_mib=d.memory_mib * pct // 100, compute_percent=pct
                    )
                containers.append(
                    ContainerAssignment(container=f"c{d.index}-{c}", vendor="acme", devices=(s,))
                )
                if s.exclusive:
                    break
        if containers:
            ledger.add(
                f"p/{name}",
                PodAssignment(node=name, containers=tuple(containers)),
                cpu_milli=rng.choice((0, 4000, 12000, 15000)),
                memory_mib=rng.choice((0, 8192)),
            )
    return ledger


def random_pod(rng: random.Random) -> PodRequest:
    cpu = rng.choice((0, 1000, 4000, 8000))
    memory = rng.choice((0, 0, 4096))
    if rng.random() < 0.1:
        return PodRequest.build(cpu_milli=cpu, memory_mib=memory)
    kind = rng.random()
    models = rng.choice(((), (), ("A100",), ("T4", "V100")))
    if kind < 0.5:
        pct = rng.choice((10, 20, 25, 30, 50, 75))
        req = ContainerRequest(
            vendor="acme",
            count=rng.choice((1, 1, 1, 2)),
            memory_percent=pct,
            compute_percent=pct,
            models_include=models,
        )
    elif kind < 0.6:
        req = ContainerRequest(vendor="acme", memory_mib=rng.choice((100, 300)), compute_percent=0)
    else:
        req = ContainerRequest(
            vendor="acme",
            count=rng.choice((1, 1, 2, 4)),
            compute_percent=100,
            exclusive=True,
            models_include=models,
        )
    return PodRequest.build([req], cpu_milli=cpu, memory_mib=memory)


def scalar_answer(
    policy: FragmentationPolicy, node: NodeState, request: PodRequest
) -> tuple[float, float | None]:
    """The scalar search's growth, and for fgd-cpu the CPU-aware growth of its placement."""
    best = policy._best(node, request)
    if not isinstance(policy, FgdCpuPolicy):
        return best.growth, None
    after = policy.host_meter.frag_after_sigs(
        node, best.after, request.cpu_milli, request.memory_mib
    )
    return best.growth, after - policy.host_meter.node_frag(node)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy_class", [FragmentationPolicy, FgdCpuPolicy])
def test_batch_and_scalar_searches_agree_exactly(seed: int, policy_class: type) -> None:
    _agree(seed, policy_class, mig=False)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("policy_class", [FragmentationPolicy, FgdCpuPolicy])
def test_batch_and_scalar_searches_agree_exactly_on_mig_gpus(seed: int, policy_class: type) -> None:
    """The same, on fleets where half the nodes have dynamic MIG GPUs in random layouts."""
    _agree(seed, policy_class, mig=True)


def _agree(seed: int, policy_class: type, mig: bool) -> None:
    rng = random.Random(seed)
    ledger = random_fleet(rng, 40, uniform=seed % 3 != 0, mig=mig)
    workload = Workload.from_requests([random_pod(rng) for _ in range(200)], coverage=1.0)
    policy = policy_class(workload)
    nodes = list(ledger.nodes.values())
    compared = on_mig = 0
    for i in range(25):
        request = random_pod(rng)
        demand = batch_demand(request)
        if demand is None:
            continue
        fitting = [n for n in nodes if policy._best(n, request).growth != float("inf")]
        if len(fitting) < BATCH_MIN:
            continue
        found = search(
            policy.meter,
            policy.host_meter if isinstance(policy, FgdCpuPolicy) else None,
            fitting,
            request,
            demand,
            1000 + i,
        )
        for node, g in zip(fitting, found, strict=True):
            if g is None:
                continue  # left to the scalar path
            growth, tie = scalar_answer(policy, node, request)
            assert g.growth == growth, (node.name, request.describe())
            if isinstance(policy, FgdCpuPolicy):
                assert g.tie == tie, (node.name, request.describe())
            compared += 1
            on_mig += any(d.geometry is not None for d in node.tables["acme"].devices)
    assert compared > 50
    assert on_mig > 50 if mig else on_mig == 0


def test_the_policy_answers_alike_through_either_path() -> None:
    """score_many (arrays for the unmeasured nodes) and score (one by one) give equal keys:
    FGD's growth, the CPU-aware growth and best-fit."""
    _alike(mig=False)


def test_the_policy_answers_alike_through_either_path_on_mig_gpus() -> None:
    _alike(mig=True)


def _alike(mig: bool) -> None:
    rng = random.Random(99)
    ledger = random_fleet(rng, 60, uniform=True, mig=mig)
    workload = Workload.from_requests([random_pod(rng) for _ in range(200)])
    many, one = FgdCpuPolicy(workload), FgdCpuPolicy(workload)
    nodes = list(ledger.nodes.values())
    for _ in range(20):
        request = random_pod(rng)
        fitting = [n for n in nodes if one._best(n, request).growth != float("inf")]
        for node in nodes:
            node.memo = {}
        batch = many.score_many(fitting, request)
        for node in nodes:
            node.memo = {}
        single = [one.score(n, request) for n in fitting]
        assert batch == single


@pytest.mark.parametrize("seed", range(5))
def test_a_signature_alone_decides_fit_and_the_booked_state(seed: int) -> None:
    """sig_can_host and booked_signature equal check_device and the device after booking."""
    rng = random.Random(seed)
    ledger = random_fleet(rng, 30, uniform=False)
    devices: list[DeviceState] = [
        d for n in ledger.nodes.values() for t in n.tables.values() for d in t.devices
    ]
    for _ in range(40):
        request = random_pod(rng)
        if not request.demands:
            continue
        demand: Demand = request.demands[0]
        for d in devices:
            pick = check_device(d, demand, None)
            sig = cached_signature(d)
            assert sig_can_host(sig, demand) == (type(pick) is tuple)
            if type(pick) is tuple:
                booked = booked_signature(sig, pick[1], pick[2], pick[3])
                d.used_slots += 1
                d.used_memory += pick[1]
                d.used_compute += pick[2]
                d.exclusive += 1 if pick[3] else 0
                try:
                    assert booked == device_signature(d)
                finally:
                    d.used_slots -= 1
                    d.used_memory -= pick[1]
                    d.used_compute -= pick[2]
                    d.exclusive -= 1 if pick[3] else 0


@pytest.mark.parametrize("seed", range(5))
def test_a_mig_signature_alone_decides_fit_and_the_booked_instance(seed: int) -> None:
    """On MIG GPUs: sig_can_host is check_device's answer, and sig_booked the signature of
    the device with the instance check_device chose booked."""
    rng = random.Random(seed)
    ledger = random_fleet(rng, 30, uniform=False, mig=True)
    devices = [
        d
        for n in ledger.nodes.values()
        for t in n.tables.values()
        for d in t.devices
        if d.geometry is not None
    ]
    assert len(devices) > 20
    seen = set()
    for _ in range(40):
        request = random_pod(rng)
        if not request.demands:
            continue
        demand: Demand = request.demands[0]
        for d in devices:
            pick = check_device(d, demand, None)
            sig = cached_signature(d)
            assert sig_can_host(sig, demand) == (type(pick) is tuple)
            booked = sig_booked(sig, demand)
            assert (booked is None) == (type(pick) is not tuple)
            if type(pick) is tuple:
                slot = pick[4]
                assert slot is not None
                seen.add(slot.split("@")[0])
                d.used_slots += 1
                d.used_memory += pick[1]
                d.used_compute += pick[2]
                d.partitions_used[slot] += 1
                try:
                    assert booked == device_signature(d)
                finally:
                    d.used_slots -= 1
                    d.used_memory -= pick[1]
                    d.used_compute -= pick[2]
                    d.partitions_used[slot] -= 1
                    if not d.partitions_used[slot]:
                        del d.partitions_used[slot]
    assert len(seen) >= 3  # several profiles chosen, not only the smallest

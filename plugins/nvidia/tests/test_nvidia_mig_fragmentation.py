"""The core's view of a dynamic MIG GPU is this plugin's: the fragmentation measures see the
instance the NVIDIA fit would create.

The FGD policies weigh each placement by the state it leaves (the core's default fit and
the device signatures, :mod:`xpushare.scheduling.fragmentation`), while the NVIDIA fit
decides the instance that is booked. If the two chose different instances, FGD would score
layouts that never happen; this holds them together over random layouts and requests.
"""

from __future__ import annotations

import random

import pytest

from xpushare.models import ContainerRequest, Device, DeviceUsage, NodeView
from xpushare.scheduling.fit import check_device
from xpushare.scheduling.partitions import geometry_of, slot_name
from xpushare.scheduling.request import Demand
from xpushare.scheduling.state import DeviceState
from xpushare.testing.partitions import A100_40GB, A100_80GB, profiles
from xpushare_nvidia import fit as nvidia_fit


def mig_device(table: object, memory: int) -> Device:
    return Device(
        vendor="nvidia",
        id="GPU-0",
        index=0,
        model="NVIDIA A100-SXM4",
        memory_mib=memory,
        share_slots=7,
        mode="mig",
        partitions=profiles(table),  # type: ignore[arg-type]
    )


def random_layout(rng: random.Random, device: Device) -> list[str]:
    geometry = geometry_of(device.partitions)
    assert geometry is not None
    booked: list[str] = []
    for _ in range(rng.choice((0, 1, 2, 3, 4, 6))):
        occ = geometry.occupancy(booked)
        options = [(s, st) for s in geometry.shapes for st in geometry.free_starts(s, occ)]
        if not options:
            break
        shape, start = rng.choice(options)
        booked.append(slot_name(shape.name, start))
    return booked


def random_request(rng: random.Random, memory: int) -> ContainerRequest:
    kind = rng.random()
    if kind < 0.15:
        return ContainerRequest(vendor="nvidia", compute_percent=100, exclusive=True)
    if kind < 0.5:
        pct = rng.choice((5, 10, 20, 25, 40, 50, 75, 100))
        return ContainerRequest(vendor="nvidia", memory_percent=pct, compute_percent=pct)
    return ContainerRequest(
        vendor="nvidia",
        memory_mib=rng.choice((1000, 5000, 9728, 15000, 20000, 30000, 40000, memory)),
        compute_percent=rng.choice((0, 10, 13, 20, 30, 45, 50, 60)),
    )


@pytest.mark.parametrize(("table", "memory"), [(A100_80GB, 81920), (A100_40GB, 40960)])
def test_the_core_books_the_instance_the_nvidia_fit_chooses(table: object, memory: int) -> None:
    rng = random.Random(7)
    device = mig_device(table, memory)
    node = NodeView(name="n", devices=(device,))
    compared = refused = 0
    for _ in range(400):
        booked = random_layout(rng, device)
        request = random_request(rng, memory)
        usage = DeviceUsage(
            device_id=device.id, used_slots=len(booked), partitions_in_use=tuple(booked)
        )
        mine = nvidia_fit.fit(request, node, {device.id: usage}, [], 1.0)
        assert mine is not None
        state = DeviceState.from_device(device)
        state.used_slots = len(booked)
        state.partitions_used.update(booked)
        core = check_device(state, Demand(request), None)
        if not mine.fits:
            assert type(core) is not tuple, (booked, request)
            refused += 1
            continue
        (got,) = mine.devices
        assert type(core) is tuple, (booked, request, got)
        assert (core[1], core[2], core[4]) == (got.memory_mib, got.compute_percent, got.partition)
        compared += 1
    assert compared > 100 and refused > 30

"""Fleets of mock-vendor nodes for the tests of the verdict cache and of /filter's verdicts.

Why shared: both check answers against a fresh fit of each node alone, on fleets of few
distinct node states (so states are shared) drawn from one seeded generator.
"""

from __future__ import annotations

import random

from xpushare.models import ContainerAssignment, ContainerRequest, Device, PodAssignment
from xpushare.scheduling import PodRequest, UsageLedger, fit_pod
from xpushare.scheduling.fit import slices


def gpus(node: str, n: int, model: str = "A100") -> list[Device]:
    return [
        Device(vendor="mock", id=f"{node}-{i}", index=i, model=model, memory_mib=1000)
        for i in range(n)
    ]


def share(percent: int, cpu: int = 0) -> PodRequest:
    req = ContainerRequest(vendor="mock", memory_percent=percent, compute_percent=percent)
    return PodRequest.build([req], cpu_milli=cpu)


def whole(n: int) -> PodRequest:
    req = ContainerRequest(vendor="mock", count=n, compute_percent=100, exclusive=True)
    return PodRequest.build([req])


def fleet(rng: random.Random, nodes: int, *, used: float = 0.0) -> UsageLedger:
    """*nodes* nodes of 1, 2 or 4 GPUs of two models and two CPU sizes; each is part used
    (a pod of 20, 50 or 100 %) with probability *used* (0: none, and no draw for it)."""
    ledger = UsageLedger()
    for n in range(nodes):
        name = f"n{n}"
        ledger.set_node(
            name,
            gpus(name, rng.choice((1, 2, 4)), model=rng.choice(("A100", "T4"))),
            cpu_milli=rng.choice((4000, 32000)),
            memory_mib=64000,
        )
        if used and rng.random() < used:
            use(ledger, f"used-{name}", name, rng.choice((20, 50, 100)))
    return ledger


def use(ledger: UsageLedger, key: str, node: str, percent: int) -> None:
    """Put a pod on *node*'s first device that holds it (the core's fit)."""
    state = ledger.node(node)
    assert state is not None
    fit = fit_pod(state, share(percent))
    if fit.fits:
        containers = tuple(
            ContainerAssignment(container=d.container, vendor=d.vendor, devices=slices(p))
            for d, p in fit.picks
        )
        ledger.add(key, PodAssignment(node=node, containers=containers))

"""Every cache keyed by request or shape is bounded, and dropping answers never changes one.

The engine, the policies and the array search remember answers per (node state, request
shape); each store has a documented bound past which it forgets. Forgetting must only cost
time: here every bound is shrunk to almost nothing and a stream of varied requests must get
exactly the decisions it gets with the default bounds.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from xpushare import hookimpl
from xpushare.models import (
    API_VERSION,
    ContainerRequest,
    Device,
    ResourceNames,
    VendorSpec,
)
from xpushare.placement import Placer, fill, memo, ranking
from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.scheduling import (
    PodRequest,
    UsageLedger,
    fragarrays,
    fragmentation,
    fragmeter,
    hostaware,
    signatures,
)
from xpushare.scheduling.state import MAX_MEMO_ENTRIES


class Deferring:
    """A vendor with a fit hook of its own that always leaves the fit to the core (as the
    NVIDIA plugin does for most requests): its answers are kept per node, not per state."""

    @hookimpl
    def xpushare_vendor(self) -> VendorSpec:
        return VendorSpec(
            name="own",
            api_version=API_VERSION,
            resource_names=ResourceNames(count="own.example.com/gpu"),
        )

    @hookimpl
    def xpushare_fit(self, request: ContainerRequest) -> None:
        return None


def build(vendor: str, memo_limit: int) -> tuple[UsageLedger, Placer]:
    ledger = UsageLedger(memo_limit=memo_limit)
    for n in range(12):
        devices = [
            Device(vendor=vendor, id=f"n{n}-{i}", index=i, model="A100", memory_mib=40_000)
            for i in range(4)
        ]
        ledger.set_node(f"n{n}", devices, cpu_milli=32_000, memory_mib=128_000)
    host = None
    if vendor == "own":
        host = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
        host.register("own", Deferring())
    return ledger, Placer(ledger, "fgd-cpu", host=host)


def stream(vendor: str, n: int) -> list[PodRequest]:
    rng = random.Random(7)
    out = []
    for i in range(n):
        if i % 3 == 0:  # a few shapes that come back
            memory, compute, cpu = 4_000 * (1 + i % 4), 25, 2_000
        else:  # and many that never do
            memory, compute, cpu = rng.randrange(500, 20_000), rng.randrange(0, 60), 0
            cpu = rng.randrange(100, 6_000) if i % 2 else 0
        request = ContainerRequest(vendor=vendor, memory_mib=memory, compute_percent=compute)
        out.append(PodRequest.build([request], cpu_milli=cpu))
    return out


def replay(vendor: str, memo_limit: int) -> tuple[list[Any], Placer]:
    """Filter, prioritize and place each request; every third placed one is counted."""
    _, placer = build(vendor, memo_limit)
    seen: list[Any] = []
    for i, request in enumerate(stream(vendor, 300)):
        result = placer.filter(request)
        seen.append((sorted(result.fits), sorted(result.failed.items())))
        seen.append(sorted(placer.prioritize(request).items()))
        decision = placer.place(request)
        seen.append(None if decision is None else (decision.node, decision.assignment))
        if decision is not None and i % 3 == 0:
            placer.commit(f"pod-{i}", request, decision.assignment)
    return seen, placer


@pytest.mark.parametrize("vendor", ["acme", "own"])
def test_tiny_bounds_decide_exactly_as_the_default_ones(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference, _ = replay(vendor, MAX_MEMO_ENTRIES)
    for module, name, value in [
        (memo, "MAX_MEMO_KEYS", 2),
        (fill, "MAX_STATE_ANSWERS", 2),
        (ranking, "MAX_TIEBREAKS", 2),
        (fill, "MAX_REQUEST_KINDS", 2),
        (fragmentation, "MAX_REQUEST_IDS", 2),
        (fragmentation, "_MAX_STATE_ANSWERS", 2),
        (fragmeter, "_MAX_VECTORS", 2),
        (fragmeter, "_MAX_MASKS", 2),
        (hostaware, "_MAX_ROWS", 2),
        (fragarrays, "MAX_BOOKED_ENTRIES", 8),
        (fragarrays, "MAX_SIGNATURES", 4),
        (fragarrays, "MAX_STATES", 4),
        (signatures, "MAX_INTERNED_SIGNATURES", 8),
    ]:
        monkeypatch.setattr(module, name, value)
    tiny, placer = replay(vendor, 2)
    assert tiny == reference
    # And the bounds held.
    assert len(placer.cache.keys.keys) <= 2 and len(placer.policy._keys) <= 2  # type: ignore[attr-defined]
    for node in placer.ledger.nodes.values():
        assert len(node.memo) <= 2 and len(node.shared) <= 2


def test_the_default_bounds_hold_under_distinct_requests() -> None:
    _, placer = replay("own", MAX_MEMO_ENTRIES)
    sizes = [len(n.memo) for n in placer.ledger.nodes.values()]
    assert max(sizes) == MAX_MEMO_ENTRIES  # reached, never passed


@pytest.mark.parametrize("vendor", ["acme", "own"])
def test_a_replays_node_copies_decide_as_the_schedulers_shared_table(vendor: str) -> None:
    """FGD's answers shared by a node state live in the policy's bounded table; only a
    replay's ledger (a memo limit above the default) copies them into the node memos as
    well. The scheduler's nodes hold none, so a stream of one-off shapes leaves nothing
    behind once the table's bound drops it, and both ways decide alike."""
    reference, scheduler = replay(vendor, MAX_MEMO_ENTRIES)
    copied, simulator = replay(vendor, 1_024)
    assert copied == reference

    def shared_copies(placer: Placer) -> int:
        """Answers in node memos without picks: the policy's state-shared ones."""
        return sum(
            isinstance(v, fragmentation.Best) and v.picks is None
            for node in placer.ledger.nodes.values()
            for v in node.memo.values()
        )

    assert scheduler.policy._by_state  # type: ignore[attr-defined]
    assert shared_copies(simulator) > 0
    assert shared_copies(scheduler) == 0

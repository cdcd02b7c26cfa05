"""DRA claims follow the same resourceVersion rules as pods: a relist never undoes newer facts.

The claim book (drabook.py) is fed by the claims' watch and its relists, as the pod state
(cluster.py) is by the pods'. Each test plays one interleaving against the book directly,
with versions chosen around the list's snapshot: a claim allocated by an event newer than
the list, one deleted before the list started, and our own bind's booking held across a
claim relist that predates it.
"""

from __future__ import annotations

import copy
from typing import Any

from sched_helpers import gpu_node

from xpushare.codec import decode_assignment, encode_assignment
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduler.drabook import ClaimBook
from xpushare.scheduler.versions import ListSnapshot
from xpushare.scheduling import UsageLedger
from xpushare.testing.claims import allocated_claim

NODE = "n1"
DRIVER = "mock.xpushare.io"


def book() -> tuple[UsageLedger, ClusterState, ClaimBook]:
    ledger = UsageLedger()
    state = ClusterState(ledger)
    state.apply_node(gpu_node(NODE, "2x A100-80GB"))
    claims = ClaimBook(ledger, ["mock"])
    state.on_node_changed.append(claims.node_changed)
    return ledger, state, claims


def allocated(version: int, device: str = "mock-n1-0", memory: str = "8Gi") -> dict[str, Any]:
    """A claim kube-scheduler allocated on *device* of NODE (no slice: the inventory maps it)."""
    pool = {"spec": {"driver": DRIVER, "pool": {"name": NODE}}}
    obj = allocated_claim(pool, device, memory=memory, cores="30", name="c", namespace="ml")
    obj["metadata"]["resourceVersion"] = str(version)
    return obj


def view(obj: dict[str, Any], version: int, *, allocation: bool = True) -> dict[str, Any]:
    """The same claim as seen at *version*, allocated or not."""
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = str(version)
    if not allocation:
        out.pop("status")
    return out


def memory_used(ledger: UsageLedger, device: str = "MOCK-n1-0") -> int:
    return ledger.device_usage(NODE, "mock")[device].used_memory_mib


def test_a_claim_allocated_by_an_event_newer_than_the_list_is_not_dropped() -> None:
    ledger, _, claims = book()
    claim = allocated(20)
    key = claims.key(claim["metadata"]["uid"])
    claims.apply_claim(claim)  # the watch: allocated at 20
    # A relist whose snapshot (15) predates the allocation: it shows the claim unallocated,
    # or not at all (created after the list). Neither undoes what version 20 said.
    claims.replace_claims([view(claim, 10, allocation=False)], ListSnapshot(15, 0.0))
    assert ledger.entry(key) is not None and memory_used(ledger) == 8192
    claims.replace_claims([], ListSnapshot(15, 0.0))
    assert ledger.entry(key) is not None and memory_used(ledger) == 8192
    # An older event of the claim (the watch replaying its creation) changes nothing either.
    claims.apply_claim(view(claim, 5, allocation=False))
    assert memory_used(ledger) == 8192
    # A list newer than the allocation that lacks the claim: it is gone.
    claims.replace_claims([], ListSnapshot(25, 0.0))
    assert ledger.entry(key) is None and memory_used(ledger) == 0
    assert claims.claims == {}


def test_a_claim_deleted_before_the_list_started_is_dropped_and_stays_gone() -> None:
    ledger, _, claims = book()
    claim = allocated(10)
    key = claims.key(claim["metadata"]["uid"])
    claims.apply_claim(claim)
    assert memory_used(ledger) == 8192
    # The watch missed the deletion (at 12, then 410 Gone); the relist at 30 lacks it.
    claims.replace_claims([], ListSnapshot(30, 0.0))
    assert ledger.entry(key) is None and memory_used(ledger) == 0
    # A late view from before the list (a lagging event) does not bring it back.
    claims.apply_claim(view(claim, 10))
    claims.apply_claim(view(claim, 29))
    assert ledger.entry(key) is None and memory_used(ledger) == 0
    # Nor does a list item of it from an older list that answered late.
    claims.replace_claims([view(claim, 10)], ListSnapshot(11, 0.0))
    assert ledger.entry(key) is None


def test_a_late_deletion_event_is_remembered_against_older_views() -> None:
    ledger, _, claims = book()
    claim = allocated(10)
    key = claims.key(claim["metadata"]["uid"])
    claims.apply_claim(claim)
    claims.delete_claim(view(claim, 12))
    assert ledger.entry(key) is None
    claims.replace_claims([view(claim, 10)], ListSnapshot(11, 0.0))
    assert ledger.entry(key) is None
    # A deallocation older than the allocation held is ignored (a claim re-ordered events).
    other = allocated(40, device="mock-n1-1", memory="4Gi")
    claims.apply_claim(other)
    claims.apply_claim(view(other, 35, allocation=False))
    assert memory_used(ledger, "MOCK-n1-1") == 4096
    claims.apply_claim(view(other, 41, allocation=False))
    assert memory_used(ledger, "MOCK-n1-1") == 0


def test_a_claim_relist_from_before_our_bind_leaves_the_binds_booking_alone() -> None:
    """No write of ours allocates a claim (kube-scheduler does; our /bind books nothing on
    a DRA node), so what our bind holds is a pod's reservation and then an assumed pod. A
    relist of claims requested before the bind sees neither and must free neither."""
    ledger, state, claims = book()
    bound = PodAssignment(
        node=NODE,
        containers=(
            ContainerAssignment(
                container="main",
                vendor="mock",
                devices=(DeviceSlice(device_id="MOCK-n1-1", memory_mib=50_000, compute_percent=0),),
            ),
        ),
    )
    ledger.reserve("uid-reserved", bound, namespace="default")
    ledger.reserve("uid-assumed", decode_assignment(encode_assignment(bound)), namespace="ml")
    ledger.confirm("uid-assumed")
    state.assume("uid-assumed")
    claim = allocated(20)
    claims.apply_claim(claim)
    claims.replace_claims([], ListSnapshot(15, 0.0))
    assert ledger.entry("uid-reserved") is not None
    assert ledger.entry("uid-assumed") is not None
    assert memory_used(ledger, "MOCK-n1-1") == 100_000
    assert ledger.entry(claims.key(claim["metadata"]["uid"])) is not None
    # A relist of claims newer than everything: the claim goes, our bind's bookings stay.
    claims.replace_claims([], ListSnapshot(30, 0.0))
    assert ledger.entry(claims.key(claim["metadata"]["uid"])) is None
    assert ledger.entry("uid-reserved") is not None
    assert ledger.entry("uid-assumed") is not None


def test_a_list_without_a_snapshot_holds_exactly_its_claims() -> None:
    """Without a snapshot (a caller that knows none) the list is newer than everything."""
    ledger, _, claims = book()
    first, second = allocated(50), allocated(60, device="mock-n1-1", memory="4Gi")
    claims.apply_claim(first)
    claims.replace_claims([second])
    assert ledger.entry(claims.key(first["metadata"]["uid"])) is None
    assert ledger.entry(claims.key(second["metadata"]["uid"])) is not None
    assert claims.synced is False and claims.claims_synced is True


def test_advance_orders_views_by_version_and_remembers_deletions() -> None:
    """The rule both books order their views by (versions.advance)."""
    from xpushare.scheduler.versions import Tombstones, advance

    held: dict[str, int] = {}
    tombstones = Tombstones(4)
    assert advance(held, tombstones, "a", 5) and held == {"a": 5}
    assert not advance(held, tombstones, "a", 5)  # the same view again
    assert not advance(held, tombstones, "a", 4)  # an older one
    assert advance(held, tombstones, "a", 0)  # no version: never judged older, not held
    assert held == {"a": 5}
    tombstones.bury("b", 9)  # deleted at 9
    assert not advance(held, tombstones, "b", 8)  # a late view cannot bring it back
    assert advance(held, tombstones, "b", 10) and held["b"] == 10


def test_gone_as_of_keeps_what_changed_after_the_list() -> None:
    """The rule the relists of nodes, claims and handoff Leases remove objects by."""
    from xpushare.scheduler.versions import gone_as_of

    assert gone_as_of(5, ListSnapshot(10, 0.0)) == 10  # missing from a newer list: gone then
    assert gone_as_of(10, ListSnapshot(10, 0.0)) == 10
    assert gone_as_of(11, ListSnapshot(10, 0.0)) is None  # changed after the list: kept
    assert gone_as_of(7, ListSnapshot(0, 0.0)) == 7  # a list of unknown version
    assert gone_as_of(7, None) == 7  # a list newer than everything

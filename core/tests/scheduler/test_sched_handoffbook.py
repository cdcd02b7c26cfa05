"""The handoff book (scheduler/handoffbook.py): every node's handoff Lease in version order.

What these pin: a view older than the one held (a lagging event, a slow list, the watch's
echo of our own write) changes nothing; a Lease cannot speak for another node's handoff; a
hostile term or handoff is reported and never crashes the book; a relist removes only what
its snapshot is newer than; a deleted Lease's late events do not bring it back.
"""

from __future__ import annotations

from typing import Any

import pytest

from xpushare.codec import (
    HANDOFF_KEY,
    TERM_KEY,
    Handoff,
    encode_handoff,
    handoff_lease_name,
)
from xpushare.models import PodRef
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduler.handoffbook import MAX_NODE_NAME, HandoffBook
from xpushare.scheduler.versions import ListSnapshot
from xpushare.scheduling import UsageLedger


def handoff_of(pod: str, node: str = "n", term: int = 0) -> str:
    ref = PodRef(namespace="team", name=pod, uid=f"uid-{pod}")
    return encode_handoff(Handoff.begin(ref, ("mock",), now=10.0, ttl_s=30, term=term), node=node)


def lease(
    node: str,
    version: int | str,
    *,
    handoff: str | None = None,
    term: str | None = None,
    name: str | None = None,
    holder: Any = None,
    uid: str = "",
) -> dict[str, Any]:
    """A handoff Lease as the watch or a write's answer shows it."""
    annotations = {}
    if handoff is not None:
        annotations[HANDOFF_KEY] = handoff
    if term is not None:
        annotations[TERM_KEY] = term
    return {
        "metadata": {
            "name": handoff_lease_name(node) if name is None else name,
            "namespace": "kube-system",
            "uid": uid or f"uid-lease-{node}",
            "resourceVersion": str(version),
            "annotations": annotations,
        },
        "spec": {"holderIdentity": node if holder is None else holder},
    }


class Recorder:
    """The book's reporter and change callback, recorded."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str, str]] = []
        self.changed: list[str] = []

    def report(self, kind: str, obj: Any, key: str, message: str) -> None:
        self.reports.append((kind, key, message))


@pytest.fixture
def clock() -> list[float]:
    return [1000.0]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def book(clock: list[float], recorder: Recorder) -> HandoffBook:
    made = HandoffBook(report=recorder.report, clock=lambda: clock[0])
    made.on_changed.append(recorder.changed.append)
    return made


def raw_of(book: HandoffBook, node: str = "n") -> str | None:
    record = book.get(node)
    assert record is not None, f"no record of node {node}"
    return record.raw


def pod_of(book: HandoffBook, node: str = "n") -> str:
    handoff = book.handoff(node)
    assert handoff is not None, f"no handoff of node {node}"
    return handoff.pod.name


# -- version order ------------------------------------------------------------------------------


def test_an_older_event_never_overrides_a_newer_one(book: HandoffBook, recorder: Recorder) -> None:
    newer, older = handoff_of("new"), handoff_of("old")
    book.apply(lease("n", 5, handoff=newer, term="3"))
    book.apply(lease("n", 4, handoff=older, term="2"))
    record = book.get("n")
    assert record is not None
    assert (record.resource_version, record.raw, record.term) == ("5", newer, 3)
    assert record.handoff is not None and record.handoff.pod.name == "new"
    assert recorder.changed == ["n"]
    # A newer one does.
    book.apply(lease("n", 6, term="3"))
    assert book.get("n") is not None and raw_of(book) is None
    assert book.handoff("n") is None
    assert recorder.changed == ["n", "n"]


def test_an_older_list_item_never_overrides_a_newer_one(
    book: HandoffBook, recorder: Recorder
) -> None:
    newer = handoff_of("new")
    book.apply(lease("n", 9, handoff=newer))
    # A list whose snapshot predates our write still shows the old state of the Lease.
    book.replace([lease("n", 4, handoff=handoff_of("old"))], ListSnapshot(version=6, started=0))
    record = book.get("n")
    assert record is not None and (record.resource_version, record.raw) == ("9", newer)
    assert recorder.changed == ["n"]
    assert book.synced


def test_the_echo_of_our_own_write_is_ignored(
    book: HandoffBook, recorder: Recorder, clock: list[float]
) -> None:
    ours = lease("n", 7, handoff=handoff_of("p"), term="2")
    book.apply(ours)  # the answer of our own write
    record = book.get("n")
    assert record is not None and record.seen == 1000.0
    clock[0] = 1050.0
    book.apply(ours)  # the watch's event of the same write, later
    assert recorder.changed == ["n"]
    assert record.seen == 1000.0  # its lifetime is not restarted by the echo


def test_a_version_that_is_not_a_number_is_applied(book: HandoffBook) -> None:
    """resourceVersions are opaque by contract: one that is not etcd's integer is never
    judged older (versions.py), so the view is taken rather than dropped."""
    book.apply(lease("n", 5, handoff=handoff_of("a")))
    book.apply(lease("n", "opaque", handoff=handoff_of("b")))
    assert pod_of(book) == "b"


def test_seen_is_the_time_the_value_changed_not_the_version(
    book: HandoffBook, clock: list[float]
) -> None:
    value = handoff_of("p")
    book.apply(lease("n", 1, handoff=value, term="1"))
    clock[0] = 1010.0
    book.apply(lease("n", 2, handoff=value, term="2"))  # same handoff, another writer's term
    record = book.get("n")
    assert record is not None and record.seen == 1000.0 and record.term == 2
    clock[0] = 1020.0
    book.apply(lease("n", 3, handoff=handoff_of("q"), term="2"))
    assert record.seen == 1020.0


# -- a Lease speaks for its own node only -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "holder"),
    [
        ("handoff.other", "n"),  # names another node's handoff
        ("handoff.n", "other"),  # the holder claims another node's handoff
        ("handoff.n", ""),
        ("handoff.n", 7),
        ("handoff.n", ["n"]),
        ("handoff." + "x" * MAX_NODE_NAME, "x" * (MAX_NODE_NAME + 1)),
        ("something", "n"),
    ],
)
def test_a_lease_whose_name_is_not_its_holders_is_reported_and_ignored(
    book: HandoffBook, recorder: Recorder, name: str, holder: Any
) -> None:
    kept = handoff_of("kept")
    book.apply(lease("n", 3, handoff=kept))
    book.apply(lease("other", 4, handoff=handoff_of("kept", node="other")))
    recorder.changed.clear()
    hostile = lease("n", 10, handoff=handoff_of("hostile"), term="99", name=name, holder=holder)
    book.apply(hostile)
    assert [(kind, key) for kind, key, _ in recorder.reports] == [("lease", "spec.holderIdentity")]
    assert name in recorder.reports[0][2] or repr(name) in recorder.reports[0][2]
    assert raw_of(book, "n") == kept
    other = book.get("other")
    assert other is not None and other.resource_version == "4"
    assert set(book.records) == {"n", "other"}
    assert book.highest_term == 0
    # Its deletion is not the node's either.
    book.delete(hostile)
    assert set(book.records) == {"n", "other"}
    assert recorder.changed == []


def test_a_lease_without_a_spec_is_reported_and_ignored(
    book: HandoffBook, recorder: Recorder
) -> None:
    obj = lease("n", 1, handoff=handoff_of("p"))
    obj["spec"] = None
    book.apply(obj)
    assert book.records == {} and len(recorder.reports) == 1


def test_a_node_with_a_name_too_long_for_the_prefix_has_its_digest_lease(
    book: HandoffBook, recorder: Recorder
) -> None:
    node = "n" * MAX_NODE_NAME
    name = handoff_lease_name(node)
    assert name.startswith("handoff-")
    book.apply(lease(node, 1, handoff=handoff_of("p", node=node)))
    assert recorder.reports == [] and raw_of(book, node) is not None


# -- hostile values -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "term", ["abc", "-1", "1.5", "", "9" * 11, "2147483648", "\u0661", "7" * 5000]
)
def test_a_malformed_term_is_reported_and_read_as_none(
    book: HandoffBook, recorder: Recorder, term: str
) -> None:
    book.apply(lease("n", 1, term="4"))
    book.apply(lease("n", 2, handoff=handoff_of("p"), term=term))
    record = book.get("n")
    assert record is not None and record.term is None and record.resource_version == "2"
    assert record.handoff is not None  # the rest of the Lease is read
    assert [(kind, key) for kind, key, _ in recorder.reports] == [("lease", TERM_KEY)]
    message = recorder.reports[0][2]
    assert "node n" in message and len(message) < 400  # bounded: the value is cut
    assert book.highest_term == 4  # never lowered


@pytest.mark.parametrize("raw", ["{garbled", "", "null", "[]", "{}", "x" * 100_000])
def test_a_malformed_handoff_is_reported_and_kept_as_an_error(
    book: HandoffBook, recorder: Recorder, raw: str
) -> None:
    book.apply(lease("n", 1, handoff=raw, term="2"))
    record = book.get("n")
    assert record is not None
    assert (record.raw, record.handoff, record.term) == (raw, None, 2)
    assert record.error
    assert [(kind, key) for kind, key, _ in recorder.reports] == [("lease", HANDOFF_KEY)]
    assert recorder.changed == ["n"]
    # The next value replaces the error.
    book.apply(lease("n", 2, handoff=handoff_of("p"), term="2"))
    assert record.error is None and record.handoff is not None


def test_a_book_that_does_not_decode_keeps_the_raw_value_only(recorder: Recorder) -> None:
    book = HandoffBook(report=recorder.report, decode=False)
    for version, raw in ((1, handoff_of("p")), (2, "{garbled")):
        book.apply(lease("n", version, handoff=raw, term="3"))
        record = book.get("n")
        assert record is not None
        assert (record.raw, record.handoff, record.error, record.term) == (raw, None, None, 3)
    assert recorder.reports == []


# -- relists ------------------------------------------------------------------------------------


def test_replace_removes_only_records_at_or_below_the_lists_version(
    book: HandoffBook, recorder: Recorder
) -> None:
    for node, version in (("listed", 3), ("older", 8), ("at", 10), ("newer", 12)):
        book.apply(lease(node, version, handoff=handoff_of("p", node=node)))
    recorder.changed.clear()
    book.replace([lease("listed", 3, handoff=handoff_of("p", node="listed"))], ListSnapshot(10, 0))
    assert set(book.records) == {"listed", "newer"}
    assert sorted(recorder.changed) == ["at", "older"]
    assert book.synced
    # The removed ones are buried at the list's version: their late events do not return.
    book.apply(lease("older", 8, handoff=handoff_of("p", node="older")))
    book.apply(lease("at", 10, handoff=handoff_of("p", node="at")))
    assert set(book.records) == {"listed", "newer"}
    # A Lease created after the list is taken.
    book.apply(lease("at", 11, handoff=handoff_of("q", node="at")))
    assert set(book.records) == {"listed", "newer", "at"}


def test_replace_without_a_snapshot_removes_every_record_not_listed(book: HandoffBook) -> None:
    book.apply(lease("a", 3))
    book.apply(lease("b", 30))
    book.replace([lease("a", 3)])
    assert set(book.records) == {"a"}
    book.apply(lease("b", 30))  # its late event: buried at the version held
    assert set(book.records) == {"a"}


def test_replace_skips_items_that_are_not_objects_and_reports_foreign_leases(
    book: HandoffBook, recorder: Recorder
) -> None:
    items: list[Any] = [None, "x", lease("n", 2), lease("n", 3, name="handoff.zzz")]
    book.replace(items, ListSnapshot(5, 0))
    record = book.get("n")
    assert set(book.records) == {"n"} and record is not None and record.resource_version == "2"
    assert [key for _, key, _ in recorder.reports] == ["spec.holderIdentity"]


# -- deletions ----------------------------------------------------------------------------------


def test_delete_buries_a_tombstone_so_a_late_added_cannot_bring_it_back(
    book: HandoffBook, recorder: Recorder
) -> None:
    added = lease("n", 5, handoff=handoff_of("p"), uid="first")
    book.apply(added)
    book.delete(lease("n", 6, handoff=handoff_of("p"), uid="first"))
    assert book.get("n") is None and recorder.changed == ["n", "n"]
    book.apply(added)  # the ADDED a lagging watch delivers after the deletion
    book.apply(lease("n", 6, handoff=handoff_of("p"), uid="first"))
    assert book.get("n") is None
    assert recorder.changed == ["n", "n"]
    # A Lease created again afterwards (a newer version) is the node's.
    book.apply(lease("n", 9, handoff=handoff_of("q"), uid="second"))
    record = book.get("n")
    assert record is not None and record.uid == "second" and record.resource_version == "9"


def test_the_deletion_of_an_earlier_lease_does_not_remove_the_current_one(
    book: HandoffBook, recorder: Recorder
) -> None:
    book.apply(lease("n", 10, handoff=handoff_of("p"), uid="second"))
    book.delete(lease("n", 7, uid="first"))  # a lagging watch's DELETED of its predecessor
    assert raw_of(book) is not None and recorder.changed == ["n"]


def test_deleting_an_unknown_lease_buries_it_all_the_same(
    book: HandoffBook, recorder: Recorder
) -> None:
    book.delete(lease("n", 6))
    assert recorder.changed == []
    book.apply(lease("n", 5, handoff=handoff_of("p")))  # its ADDED, after its DELETED
    assert book.get("n") is None


def test_forget_keeps_a_newer_lease_the_watch_showed_meanwhile(
    book: HandoffBook, recorder: Recorder
) -> None:
    book.apply(lease("n", 5, handoff=handoff_of("p")))
    # A write conditioned on version 5 answers 404; meanwhile the watch showed the Lease
    # created again (version 9). The answer was about version 5: version 9 stays.
    book.apply(lease("n", 9, handoff=handoff_of("q"), uid="again"))
    book.forget("n", "5")
    assert pod_of(book) == "q"
    assert recorder.changed == ["n", "n"]


def test_forget_drops_the_record_and_says_so(book: HandoffBook, recorder: Recorder) -> None:
    book.apply(lease("n", 5, handoff=handoff_of("p"), term="4"))
    book.forget("n", "5")
    assert book.get("n") is None and book.handoff("n") is None
    assert recorder.changed == ["n", "n"]
    book.forget("n", "5")  # nothing held: nothing changed
    book.forget("never", "1")
    assert recorder.changed == ["n", "n"]
    # A lagging watch event of the Lease that is gone cannot bring its handoff back.
    book.apply(lease("n", 5, handoff=handoff_of("p"), term="4"))
    assert book.get("n") is None
    assert book.highest_term == 4  # a term seen stays the floor
    # The next write's answer (the Lease created again) is taken.
    book.apply(lease("n", 8, handoff=handoff_of("q")))
    assert pod_of(book) == "q"


def test_highest_term_is_the_highest_any_handoff_carried(book: HandoffBook) -> None:
    assert book.highest_term == 0
    book.apply(lease("a", 1, term="3"))
    book.apply(lease("b", 2, term="9"))
    book.apply(lease("a", 3, term="5"))
    assert book.highest_term == 9
    book.apply(lease("b", 4, term="2"))  # rewritten under a lower term: the floor stays
    book.delete(lease("b", 5))
    assert book.highest_term == 9
    book.apply(lease("c", 6, term="2147483647"))
    assert book.highest_term == 2147483647


def test_cluster_state_highest_term_is_the_books() -> None:
    cluster = ClusterState(UsageLedger())
    assert cluster.highest_term == 0
    cluster.handoff_book.apply(lease("n", 1, term="12"))
    assert cluster.highest_term == 12
    assert cluster.handoff("n") is None
    cluster.handoff_book.apply(lease("n", 2, handoff=handoff_of("p"), term="12"))
    assert cluster.handoff("n") == cluster.handoff_book.handoff("n") is not None


def test_on_changed_is_called_for_each_change_in_order(book: HandoffBook) -> None:
    calls: list[str] = []
    book.on_changed.append(calls.append)
    book.apply(lease("a", 1))
    book.apply(lease("b", 2, handoff=handoff_of("p", node="b")))
    book.apply(lease("a", 1))  # echo: no call
    book.apply(lease("a", 3, term="1"))  # only the version and term changed
    book.replace([lease("a", 3)], ListSnapshot(4, 0))  # b gone; a unchanged
    book.forget("a", "3")
    assert calls == ["a", "b", "a", "b", "a"]

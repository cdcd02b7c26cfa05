"""resourceVersions as the scheduler orders them: per object, and a list's snapshot.

Why a module of its own: the usage ledger is fed from four sources that interleave (the
watch, relists, the reads that follow a change of leader, the answers of our own writes),
and only the order of the API server's own versions says which of two views of a pod is
newer. client-go's reflector and kube-scheduler's assume cache keep the same rules: an event
or list item older than what is held is ignored; a relist removes only what its snapshot
is newer than; our own bookings stay assumed until the API server shows them.

resourceVersions are opaque to clients by contract, but every API server serves etcd's
revisions, one counter for the whole store: integers, comparable across objects and with a
list's version. A version that is not an integer is never judged older (it is applied), so
a server that broke that rule would make the cache trust every event, as it did before.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from xpushare.scheduler import objects as ob

#: Longest version read as a number: etcd's revision is an int64 (19 digits); anything
#: longer is not one of its revisions and is treated as unknown, never parsed.
MAX_VERSION_DIGITS = 20
#: Deleted objects remembered with their deletion version (per kind: pods, nodes, claims),
#: so that an older event or list item (a lagging watch, a slow relist, a read that raced a
#: deletion) cannot bring one back. 16,384 deletions is minutes of churn at the 100 pods/s a
#: large cluster runs (a claim template makes one claim a pod, so claims churn no faster); a
#: view older than that comes from a watch that would have been restarted long before.
MAX_TOMBSTONES = 16_384


def number(version: str) -> int:
    """The revision a resourceVersion string holds; 0 when it is not one (unknown)."""
    if version and len(version) <= MAX_VERSION_DIGITS and version.isdigit():
        return int(version)
    return 0


def of(obj: Any) -> int:
    """An object's revision (0: none, or not a number)."""
    return number(ob.resource_version(obj))


@dataclass(frozen=True, slots=True)
class ListSnapshot:
    """What a relist's answer is as of.

    ``version`` is the list's resourceVersion: every object at or below it that is absent
    from the list is gone. ``started`` is this process's monotonic clock when the list's
    first page was requested: the API server reads a list without a resourceVersion at
    its current revision, after the request arrived, so everything this process saw
    committed before ``started`` (our own Bindings, whose answers carry no version) is in it.
    """

    version: int
    started: float


def gone_as_of(held: int, snapshot: ListSnapshot | None) -> int | None:
    """The version at which an object held at *held* and missing from a relist is gone: the
    list's (or what is held, for a list of unknown version); None when what is held is
    newer than the list's snapshot (changed after it: not gone). *snapshot* None is a list
    newer than everything.

    The rule the relists of nodes, claims and handoff Leases remove objects by (the pods'
    adds our assumed bookings, cluster.py)."""
    listed = snapshot.version if snapshot is not None else 0
    if listed and held > listed:
        return None
    return listed or held


class Tombstones:
    """The deletion versions of the last objects deleted, so an older event or list item
    cannot bring one back (bounded: oldest forgotten first)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._versions: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._versions)

    def get(self, key: str) -> int | None:
        return self._versions.get(key)

    def bury(self, key: str, version: int) -> None:
        if version <= 0:
            return
        self._versions[key] = max(version, self._versions.get(key, 0))
        self._versions.move_to_end(key)
        while len(self._versions) > self.limit:
            self._versions.popitem(last=False)


def advance(held: dict[str, int], tombstones: Tombstones, key: str, version: int) -> bool:
    """Whether a view of *key* at *version* is newer than what is held of it (its live
    version in *held*, else its deletion in *tombstones*); a newer one is recorded in
    *held*. A view at or below is to be ignored: it, or a newer one, was applied already.
    A version of 0 (none, or not a number) is never judged older, and is not recorded.

    The one rule the pod state (cluster.py) and the claim book (drabook.py) order their
    views by; called once per watch event, list item or read."""
    if not version:
        return True
    known = held.get(key)
    if known is None:
        known = tombstones.get(key)
    if known is not None and version <= known:
        return False
    held[key] = version
    return True

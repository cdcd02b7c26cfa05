"""The usage ledger's contents and its read-only questions: the nodes, the pods counted,
the inventory as the vendors' hooks see it, the namespaces' totals, what is over-booked.

Apart from :mod:`xpushare.scheduling.ledger`, which changes them, so that a reader of the
questions need not read the bookkeeping (and each class stays short).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xpushare.models import Device, DeviceUsage, NodeView
from xpushare.scheduling import audit
from xpushare.scheduling.charges import NamespaceBook, PodEntry
from xpushare.scheduling.state import MAX_MEMO_ENTRIES, NodeState

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping


class LedgerView:
    """What the ledger holds, and the questions it answers without changing anything
    (:class:`~xpushare.scheduling.ledger.UsageLedger` keeps it up to date).

    ``memory_overcommit`` and ``compute_overcommit`` give, per vendor name, how far device
    memory and compute may be over-booked (HAMi's ``deviceMemoryScaling`` and
    ``deviceCoreScaling``, hami-protocol.md §3.8); the key ``"*"`` sets the default.
    ``memo_limit`` bounds the answers the placement engine keeps per node and per node state
    (:data:`~xpushare.scheduling.state.MAX_MEMO_ENTRIES`).
    """

    def __init__(
        self,
        *,
        memory_overcommit: Mapping[str, float] | None = None,
        compute_overcommit: Mapping[str, float] | None = None,
        memo_limit: int = MAX_MEMO_ENTRIES,
    ) -> None:
        if memo_limit < 1:
            raise ValueError(f"memo_limit must be at least 1, got {memo_limit}")
        #: Answers each node keeps per state (``NodeState.memo_limit``).
        self.memo_limit = memo_limit
        self._memory_oc = dict(memory_overcommit or {})
        self._compute_oc = dict(compute_overcommit or {})
        for name, factors in (("memory", self._memory_oc), ("compute", self._compute_oc)):
            for vendor, factor in factors.items():
                if not factor > 0:
                    raise ValueError(
                        f"{name} over-commit for vendor {vendor!r} must be > 0, got {factor}"
                    )
        self._nodes: dict[str, NodeState] = {}
        self._inventory: dict[str, dict[str, tuple[Device, ...]]] = {}
        self._entries: dict[str, PodEntry] = {}
        #: What each namespace's pods book: what quotas compare to.
        self._namespaces = NamespaceBook()

    # -- configuration ----------------------------------------------------------------------

    def memory_overcommit(self, vendor: str) -> float:
        return self._memory_oc.get(vendor, self._memory_oc.get("*", 1.0))

    def compute_overcommit(self, vendor: str) -> float:
        return self._compute_oc.get(vendor, self._compute_oc.get("*", 1.0))

    # -- queries ----------------------------------------------------------------------------

    @property
    def nodes(self) -> Mapping[str, NodeState]:
        return self._nodes

    def node(self, name: str) -> NodeState | None:
        return self._nodes.get(name)

    def entry(self, key: str) -> PodEntry | None:
        return self._entries.get(key)

    def entries(self) -> Iterator[PodEntry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def namespace_usage(self, namespace: str) -> Mapping[str, tuple[int, int]]:
        """Per vendor, the (device memory MiB, compute percent) *namespace*'s pods book."""
        return self._namespaces.usage(namespace)

    def namespaces(self) -> list[str]:
        """The namespaces whose pods book devices now."""
        return self._namespaces.names()

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def devices(self, node: str, vendor: str | None = None) -> tuple[Device, ...]:
        """The inventory of *node* (of one vendor, or all)."""
        inv = self._inventory.get(node, {})
        if vendor is not None:
            return inv.get(vendor, ())
        return tuple(d for devices in inv.values() for d in devices)

    def node_view(self, node: str, vendor: str) -> NodeView:
        """The node as a vendor's scheduler-side hooks see it: that vendor's devices only."""
        state = self._nodes.get(node)
        return NodeView(
            name=node,
            devices=self.devices(node, vendor),
            labels=dict(state.labels) if state else {},
        )

    def device_usage(self, node: str, vendor: str) -> dict[str, DeviceUsage]:
        """Allocated share per device id of *vendor* on *node*, as hooks receive it."""
        state = self._nodes.get(node)
        if state is None:
            return {}
        table = state.tables.get(vendor)
        out = {d.id: d.to_usage() for d in table.devices} if table else {}
        for (v, device_id), o in state.orphans.items():
            if v == vendor and device_id not in out:
                out[device_id] = DeviceUsage(
                    device_id=device_id,
                    used_slots=o[0],
                    used_memory_mib=o[1],
                    used_compute_percent=o[2],
                    exclusive=o[3] > 0,
                )
        return out

    def overbooked(self, node: str, key: str | None = None) -> list[str]:
        """What is booked past capacity on *node*'s devices (on those pod *key* holds, when
        given); empty when all is within capacity. Sentences naming each device.

        The bind path asks this after it re-read a node's pods: a decision taken before
        another replica's last Binding reached us must not be committed on top of it. Fault
        tests ask it of a ledger rebuilt from the API server's annotations.
        """
        state = self._nodes.get(node)
        if state is None:
            return []
        entry = None
        if key is not None:
            entry = self._entries.get(key)
            if entry is None:
                return []
        return audit.overbooked(node, state, entry)

    # -- whole-state views (tests, self-checks, `xpushare fit`) --------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything counted, as plain data: equal for equal states."""
        return audit.snapshot(self._nodes)


__all__ = ["LedgerView"]

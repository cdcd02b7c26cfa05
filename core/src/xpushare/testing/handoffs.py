"""The nodes' handoff Leases in a :class:`~xpushare.testing.apiserver.FakeApiServer`.

Why helpers: the handoff of a node lives in a Lease of its own (``handoff.<node>``,
scheduler/handoffbook.py), not on the Node; tests read it, and plant stale or hostile ones,
as the scheduler and the node agent would find them, without repeating the Lease's shape.
"""

from __future__ import annotations

from typing import Any

from xpushare.codec import (
    DEFAULT_HANDOFF_NAMESPACE,
    HANDOFF_KEY,
    HANDOFF_LEASE_LABEL,
    HANDOFF_LEASE_ROLE,
    handoff_lease_name,
)
from xpushare.testing.apiserver import FakeApiServer

__all__ = ["handoff_annotations", "handoff_lease", "handoff_value", "set_handoff"]

Object = dict[str, Any]


def handoff_lease(
    api: FakeApiServer, node: str, namespace: str = DEFAULT_HANDOFF_NAMESPACE
) -> Object | None:
    """A copy of *node*'s handoff Lease, or None when the scheduler has not created it."""
    return api.get("leases", handoff_lease_name(node), namespace)


def handoff_annotations(
    api: FakeApiServer, node: str, namespace: str = DEFAULT_HANDOFF_NAMESPACE
) -> dict[str, str]:
    """The annotations of *node*'s handoff Lease ({} without one)."""
    lease = handoff_lease(api, node, namespace)
    if lease is None:
        return {}
    return dict(lease["metadata"].get("annotations") or {})


def handoff_value(
    api: FakeApiServer, node: str, namespace: str = DEFAULT_HANDOFF_NAMESPACE
) -> str | None:
    """The raw ``xpushare.io/handoff`` of *node* (None: none)."""
    return handoff_annotations(api, node, namespace).get(HANDOFF_KEY)


def set_handoff(
    api: FakeApiServer,
    node: str,
    annotations: dict[str, str | None],
    namespace: str = DEFAULT_HANDOFF_NAMESPACE,
) -> Object:
    """Change *node*'s handoff Lease's annotations directly (None removes one), creating the
    Lease first if need be: what another replica, an older release or a hand edit left."""
    name = handoff_lease_name(node)

    def change(obj: Object) -> None:
        current = obj["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value

    if api.get("leases", name, namespace) is None:
        api.put(
            "leases",
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {HANDOFF_LEASE_LABEL: HANDOFF_LEASE_ROLE},
                    "annotations": {},
                },
                "spec": {"holderIdentity": node},
            },
        )
    return api.modify("leases", name, change, namespace)

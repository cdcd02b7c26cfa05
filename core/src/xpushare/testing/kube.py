"""An in-memory Kubernetes API for the node agent: one node and its pods, no server.

Why: a vendor plugin's tests (and the conformance suite) should run the node agent's real
Allocate path without starting an API server or installing one. :class:`InMemoryKube`
implements the agent's :class:`~xpushare.node.kube.NodeKube` protocol with the semantics
that matter to it: JSON merge patches (``null`` deletes), ``resourceVersion`` that changes
on every write, and compare-and-swap when a patch carries one (HTTP 409 otherwise). The
core's own tests use a local fake API server with the real client instead.

Helpers write what the scheduler would write at bind, with the codec: :meth:`bind` puts the
assignment on a pod and the handoff in the node's handoff Lease (:attr:`InMemoryKube.lease`,
``None`` until the first bind, as the scheduler creates it at its first bind there).
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from xpushare.codec import (
    ASSIGNMENT_KEY,
    HANDOFF_KEY,
    HANDOFF_LEASE_LABEL,
    HANDOFF_LEASE_ROLE,
    Handoff,
    encode_assignment,
    encode_handoff,
    handoff_lease_name,
)
from xpushare.models import PodRef
from xpushare.node.kube import KubeConflict, KubeError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from xpushare.models import PodAssignment

__all__ = ["InMemoryKube", "merge_patch"]

JsonObject = dict[str, Any]

#: How long a handoff written by :meth:`InMemoryKube.bind` lives, seconds: "well under a
#: minute" (DESIGN.md §6).
HANDOFF_TTL_S = 30.0


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``None`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class InMemoryKube:
    """One node and the pods bound to it, for :class:`~xpushare.node.NodeAgent`."""

    def __init__(self, node_name: str, *, labels: dict[str, str] | None = None) -> None:
        self.node_name = node_name
        self.node: JsonObject = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node_name, "labels": dict(labels or {}), "annotations": {}},
        }
        self.pods: dict[tuple[str, str], JsonObject] = {}
        #: The node's handoff Lease (None: not created yet).
        self.lease: JsonObject | None = None
        #: Every patch sent, of the node and of its handoff Lease, in order.
        self.patches: list[JsonObject] = []
        self._version = 0
        self._bump(self.node)

    def _bump(self, obj: JsonObject) -> None:
        self._version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)

    # -- NodeKube ------------------------------------------------------------------------------

    async def get_node(self) -> JsonObject:
        return copy.deepcopy(self.node)

    async def patch_node(self, patch: JsonObject) -> JsonObject:
        self.node = self._patched(self.node, patch, f"node {self.node_name}")
        return copy.deepcopy(self.node)

    async def get_handoff(self) -> JsonObject | None:
        return copy.deepcopy(self.lease) if self.lease is not None else None

    def _patched(self, obj: JsonObject, patch: JsonObject, what: str) -> JsonObject:
        self.patches.append(copy.deepcopy(patch))
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            raise KubeConflict(f"patch {what}: conflict (resourceVersion {wanted} is stale)", 409)
        body = copy.deepcopy(patch)
        (body.get("metadata") or {}).pop("resourceVersion", None)
        result: JsonObject = merge_patch(obj, body)
        self._bump(result)
        return result

    async def get_pod(self, namespace: str, name: str) -> JsonObject | None:
        pod = self.pods.get((namespace, name))
        return copy.deepcopy(pod) if pod is not None else None

    async def list_node_pods(self) -> list[JsonObject]:
        return [
            copy.deepcopy(p)
            for p in self.pods.values()
            if (p.get("spec") or {}).get("nodeName") == self.node_name
        ]

    # -- what tests do -------------------------------------------------------------------------

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.node["metadata"].get("annotations") or {})

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.node["metadata"].get("labels") or {})

    @property
    def handoff_annotations(self) -> dict[str, str]:
        """The annotations of the node's handoff Lease ({} when it has none)."""
        if self.lease is None:
            return {}
        return dict(self.lease["metadata"].get("annotations") or {})

    def set_handoff_annotations(self, annotations: dict[str, str | None]) -> None:
        """Change the handoff Lease's annotations as the scheduler would (None removes one),
        creating the Lease first if need be."""
        if self.lease is None:
            self.lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": handoff_lease_name(self.node_name),
                    "labels": {HANDOFF_LEASE_LABEL: HANDOFF_LEASE_ROLE},
                    "annotations": {},
                },
                "spec": {"holderIdentity": self.node_name},
            }
        self.lease = merge_patch(self.lease, {"metadata": {"annotations": annotations}})
        self._bump(self.lease)

    def add_pod(
        self,
        name: str,
        *,
        namespace: str = "default",
        uid: str | None = None,
        phase: str = "Pending",
        annotations: dict[str, str] | None = None,
        node: str | None = None,
    ) -> PodRef:
        """A pod bound to this node (or *node*); returns its reference."""
        ref = PodRef(namespace=namespace, name=name, uid=uid or f"uid-{namespace}-{name}")
        pod: JsonObject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": ref.uid,
                "annotations": dict(annotations or {}),
                "creationTimestamp": f"2026-01-01T00:00:{len(self.pods) % 60:02d}Z",
            },
            "spec": {"nodeName": node or self.node_name},
            "status": {"phase": phase},
        }
        self._bump(pod)
        self.pods[(namespace, name)] = pod
        return ref

    def remove_pod(self, namespace: str, name: str) -> None:
        self.pods.pop((namespace, name), None)

    def bind(
        self,
        pod: PodRef,
        assignment: PodAssignment,
        *,
        vendors: Iterable[str] | None = None,
        now: float | None = None,
        ttl_s: float = HANDOFF_TTL_S,
    ) -> Handoff:
        """Write what the scheduler writes at bind: the assignment and the node's handoff."""
        key = (pod.namespace, pod.name)
        if key not in self.pods:
            raise KubeError(f"pod {pod} does not exist", 404)
        self.pods[key]["metadata"]["annotations"][ASSIGNMENT_KEY] = encode_assignment(
            assignment, pod=str(pod)
        )
        self._bump(self.pods[key])
        handoff = Handoff.begin(
            pod,
            sorted(vendors or assignment.vendors()),
            now=time.time() if now is None else now,
            ttl_s=ttl_s,
        )
        self.set_handoff_annotations({HANDOFF_KEY: encode_handoff(handoff, node=self.node_name)})
        return handoff

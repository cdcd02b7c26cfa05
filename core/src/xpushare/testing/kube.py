"""An in-memory Kubernetes API for the node agent: one node and its pods, no server.

Why: a vendor plugin's tests (and the conformance suite) should run the node agent's real
Allocate path without starting an API server or installing one. :class:`InMemoryKube`
implements the agent's :class:`~xpushare.node.kube.NodeKube` protocol with the semantics
that matter to it: JSON merge patches (``null`` deletes), ``resourceVersion`` that changes
on every write, and compare-and-swap when a patch carries one (HTTP 409 otherwise). The
core's own tests use a local fake API server with the real client instead.

Helpers write what the scheduler would write at bind, with the codec: :meth:`bind` puts the
assignment on a pod and the handoff on the node.
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from xpushare.codec import ASSIGNMENT_KEY, HANDOFF_KEY, Handoff, encode_assignment, encode_handoff
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
        self.patches.append(copy.deepcopy(patch))
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != self.node["metadata"]["resourceVersion"]:
            raise KubeConflict(
                f"patch node {self.node_name}: conflict (resourceVersion {wanted} is stale)", 409
            )
        body = copy.deepcopy(patch)
        (body.get("metadata") or {}).pop("resourceVersion", None)
        self.node = merge_patch(self.node, body)
        self._bump(self.node)
        return copy.deepcopy(self.node)

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
        self.node["metadata"].setdefault("annotations", {})[HANDOFF_KEY] = encode_handoff(
            handoff, node=self.node_name
        )
        self._bump(self.node)
        return handoff

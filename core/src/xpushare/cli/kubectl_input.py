"""``xpushare fit``'s readers of kubectl's objects: a Node and a list of Pods as printed.

``kubectl get node N -o yaml`` carries the node's devices in our inventory annotations
(``xpushare.io/inventory-<vendor>``, written by the node agent) and its CPU and memory in
``status.allocatable``; ``kubectl get pods -A -o yaml`` (a ``List``) carries each bound pod's
devices in ``xpushare.io/assignment`` and its CPU and memory in its containers' requests.
Both are turned into the document form :mod:`xpushare.cli.fit_cmd` reads, so one ledger
builder serves the two forms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from xpushare.codec import (
    ASSIGNMENT_KEY,
    decode_assignment,
    decode_inventory,
    vendor_of_inventory_key,
)
from xpushare.errors import CodecError
from xpushare.scheduling.quantity import QuantityError, cpu_millis, memory_mib

#: Pod phases whose pods hold nothing on their node any more (kubelet's and the scheduler's
#: accounting skip them the same way).
ENDED_PHASES = frozenset({"Succeeded", "Failed"})


class KubectlInputError(ValueError):
    """A kubectl object that cannot be read; the message names the object and the field."""


def is_kube_object(raw: Any) -> TypeGuard[Mapping[str, Any]]:
    """Whether *raw* looks like an object kubectl printed (it has ``metadata``)."""
    return isinstance(raw, Mapping) and isinstance(raw.get("metadata"), Mapping)


def is_list(raw: Any) -> bool:
    """A ``List``/``PodList`` as ``kubectl get pods -o yaml`` prints it, or a plain list."""
    return isinstance(raw, list) or (
        isinstance(raw, Mapping) and isinstance(raw.get("items"), list)
    )


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _quantity(value: Any, what: str, read: Any) -> int:
    try:
        return int(read(value))
    except (QuantityError, TypeError) as exc:
        raise KubectlInputError(f"{what}: {exc}") from None


def node_document(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A kubectl Node as ``fit``'s node: devices from our inventories, allocatable."""
    name = _name(obj)
    if not name:
        raise KubectlInputError("the Node has no metadata.name")
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise KubectlInputError(f"node {name}: metadata.annotations must be a mapping")
    devices: list[dict[str, Any]] = []
    for key in sorted(annotations):
        if vendor_of_inventory_key(str(key)) is None:
            continue
        try:
            inventory = decode_inventory(str(key), str(annotations[key]))
        except CodecError as exc:
            raise KubectlInputError(f"node {name}: {exc}") from None
        devices.extend(d.model_dump(mode="json") for d in inventory.devices)
    if not devices:
        raise KubectlInputError(
            f"node {name} carries no device in an xpushare.io/inventory-<vendor> annotation: "
            "is the node agent running there (kubectl -n <namespace> get pods -o wide "
            "-l app.kubernetes.io/component=node-agent)?"
        )
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    out: dict[str, Any] = {
        "name": name,
        "devices": devices,
        "labels": dict(meta.get("labels") or {}),
    }
    if "cpu" in allocatable:
        out["cpu_milli"] = _quantity(
            allocatable["cpu"], f"node {name}: status.allocatable.cpu", cpu_millis
        )
    if "memory" in allocatable:
        out["memory_mib"] = _quantity(
            allocatable["memory"],
            f"node {name}: status.allocatable.memory",
            lambda v: memory_mib(v, round_up=False),
        )
    return out


def _pod_requests(pod: Mapping[str, Any], who: str) -> tuple[int, int]:
    """CPU (millicores) and memory (MiB) the pod holds on its node, as kube-scheduler
    counts them: the containers' sum, or the largest init container's when larger."""
    spec = pod.get("spec") or {}

    def each(key: str) -> list[tuple[int, int]]:
        out = []
        for c in spec.get(key) or []:
            res = c.get("resources") or {}
            asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
            where = f"{who}: container {c.get('name', '?')!r}"
            cpu = _quantity(asked["cpu"], f"{where} cpu", cpu_millis) if "cpu" in asked else 0
            mem = (
                _quantity(asked["memory"], f"{where} memory", memory_mib)
                if "memory" in asked
                else 0
            )
            out.append((cpu, mem))
        return out

    app = each("containers")
    init = each("initContainers")
    cpu = max(sum(c for c, _ in app), max((c for c, _ in init), default=0))
    mem = max(sum(m for _, m in app), max((m for _, m in init), default=0))
    return cpu, mem


def pods_on_node(raw: Any, node: str) -> list[dict[str, Any]]:
    """The pods of a kubectl List that hold something on *node*, as ``fit``'s ``pods``:
    their assignment (none for a pod without devices) and CPU and memory requests."""
    items = raw if isinstance(raw, list) else raw.get("items") or []
    out: list[dict[str, Any]] = []
    for i, pod in enumerate(items):
        if not isinstance(pod, Mapping):
            raise KubectlInputError(f"item {i} of the pod list is not an object")
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        if spec.get("nodeName") != node or status.get("phase") in ENDED_PHASES:
            continue
        meta = pod.get("metadata") or {}
        who = f"pod {meta.get('namespace') or 'default'}/{meta.get('name') or i}"
        value = (meta.get("annotations") or {}).get(ASSIGNMENT_KEY)
        assignment: dict[str, Any] = {"node": node, "containers": []}
        if value is not None:
            try:
                decoded = decode_assignment(str(value), pod=who.removeprefix("pod "))
            except CodecError as exc:
                raise KubectlInputError(str(exc)) from None
            assignment = decoded.model_dump(mode="json")
        cpu, mem = _pod_requests(pod, who)
        out.append(
            {
                "name": who.removeprefix("pod "),
                "assignment": assignment,
                "cpu_milli": cpu,
                "memory_mib": mem,
            }
        )
    return out


__all__ = [
    "KubectlInputError",
    "is_kube_object",
    "is_list",
    "node_document",
    "pods_on_node",
]

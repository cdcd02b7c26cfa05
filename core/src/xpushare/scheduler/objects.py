"""Raw Kubernetes JSON (from watches, the extender and the webhook) to the views hooks take.

Why by hand and not the client's models: a pod arrives in every /filter body and every pod
watch event, and only a handful of its fields matter here; reading them from the parsed JSON
costs microseconds, building the client's full model costs milliseconds. Input is
untrusted (kube-scheduler is trusted, but a person with curl or a bug is not), so every
accessor tolerates a missing or wrongly typed field and only :func:`pod_view` raises, with
a ``ValueError`` that says which field is wrong.
"""

from __future__ import annotations

import datetime
from typing import Any

from xpushare.models import ContainerView, PodRef, PodView

Object = dict[str, Any]

#: Phases after which a pod holds no device any more.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words, for error messages about a wrong shape."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def meta(obj: Any) -> Object:
    value = obj.get("metadata") if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def spec(obj: Any) -> Object:
    value = obj.get("spec") if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def status(obj: Any) -> Object:
    value = obj.get("status") if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def annotations_of(obj: Any) -> dict[str, str]:
    value = meta(obj).get("annotations")
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def labels_of(obj: Any) -> dict[str, str]:
    value = meta(obj).get("labels")
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def name(obj: Any) -> str:
    return _str(meta(obj).get("name"))


def namespace(obj: Any) -> str:
    return _str(meta(obj).get("namespace")) or "default"


def uid(obj: Any) -> str:
    return _str(meta(obj).get("uid"))


def resource_version(obj: Any) -> str:
    return _str(meta(obj).get("resourceVersion"))


def pod_key(obj: Any) -> str:
    """The ledger key of a pod: its UID, or namespace/name when it has none."""
    return uid(obj) or f"{namespace(obj)}/{name(obj)}"


def pod_ref(obj: Any) -> PodRef:
    return PodRef(namespace=namespace(obj), name=name(obj) or "?", uid=uid(obj))


def node_name(obj: Any) -> str:
    return _str(spec(obj).get("nodeName"))


def phase(obj: Any) -> str:
    return _str(status(obj).get("phase"))


def started(obj: Any) -> bool:
    """Whether kubelet has admitted the pod: every Allocate of its devices is behind it.

    Why ``status.startTime`` counts: kubelet admits a pod (its device manager calls every
    Allocate the pod needs) before the pod's first status write, and its status manager
    stamps ``startTime`` into that write (kubelet.go ``HandlePodAdditions`` admits, then
    the pod worker's ``SyncPod`` calls ``SetPodStatus``; status_manager.go sets
    ``StartTime`` when it is unset; a pod refused at admission gets phase Failed the same
    way). That write is kubelet's own, made whether or not xpushare runs, so the handoff
    that named the pod may be replaced without a write of the node agent (DESIGN.md §6).
    """
    st = status(obj)
    if _str(st.get("startTime")):
        return True
    if phase(obj) in ("Running", "Succeeded", "Failed"):
        return True
    for group in ("initContainerStatuses", "containerStatuses"):
        items = st.get(group)
        if not isinstance(items, list):
            continue
        for item in items:
            state = item.get("state") if isinstance(item, dict) else None
            if isinstance(state, dict) and ("running" in state or "terminated" in state):
                return True
    return False


def bound_since(obj: Any) -> float | None:
    """When the pod was scheduled (its PodScheduled condition) or started, Unix seconds."""
    st = status(obj)
    stamps = [st.get("startTime")]
    conditions = st.get("conditions")
    if isinstance(conditions, list):
        stamps.extend(
            c.get("lastTransitionTime")
            for c in conditions[:32]
            if isinstance(c, dict) and c.get("type") == "PodScheduled"
        )
    found = [s for s in map(_timestamp, stamps) if s is not None]
    return min(found) if found else None


def _timestamp(value: Any) -> float | None:
    # RFC 3339 as the API server writes it (``2024-05-01T12:00:00Z``); anything else: None.
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _resources(container: Object, which: str, where: str) -> dict[str, str]:
    resources = container.get("resources")
    if resources is None:
        return {}
    if not isinstance(resources, dict):
        raise ValueError(f"{where}.resources must be an object")
    values = resources.get(which)
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError(f"{where}.resources.{which} must be an object")
    out: dict[str, str] = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(f"{where}.resources.{which}[{key!r}] must be a quantity string")
        out[str(key)] = str(value)
    return out


def _env(container: Object) -> dict[str, str]:
    items = container.get("env")
    out: dict[str, str] = {}
    if isinstance(items, list):
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                value = item.get("value")
                out[item["name"]] = value if isinstance(value, str) else ""
    return out


def containers(obj: Any) -> list[tuple[Object, bool, int]]:
    """(container, is init, index in its list) for init containers, then the others."""
    out: list[tuple[Object, bool, int]] = []
    sp = spec(obj)
    for field, init in (("initContainers", True), ("containers", False)):
        items = sp.get(field)
        if items is None:
            continue
        if not isinstance(items, list):
            raise ValueError(f"spec.{field} must be a list")
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise ValueError(f"spec.{field}[{index}] must be an object")
            out.append((item, init, index))
    return out


#: The pod's container lists in the order the webhook reports them; ephemeral containers
#: (``kubectl debug``) hold no devices, so :func:`containers` leaves them out.
CONTAINER_FIELDS = ("initContainers", "containers", "ephemeralContainers")


def all_containers(obj: Any) -> list[tuple[str, int, Object]]:
    """(list field, index, container) for init, regular and ephemeral containers.

    Tolerant, unlike :func:`containers`: a list or item of the wrong type is skipped, since
    the callers check rules on what is there and the API server validates the shape.
    """
    out: list[tuple[str, int, Object]] = []
    sp = spec(obj)
    for field in CONTAINER_FIELDS:
        items = sp.get(field)
        if not isinstance(items, list):
            continue
        for index, item in enumerate(items):
            if isinstance(item, dict):
                out.append((field, index, item))
    return out


def pod_view(obj: Any) -> PodView:
    """The pod as scheduler-side hooks see it; ``ValueError`` names a malformed field."""
    if not isinstance(obj, dict):
        raise ValueError("the pod must be a JSON object")
    views = []
    for container, init, index in containers(obj):
        field = "initContainers" if init else "containers"
        where = f"spec.{field}[{index}]"
        views.append(
            ContainerView(
                name=_str(container.get("name")) or f"{field}-{index}",
                limits=_resources(container, "limits", where),
                requests=_resources(container, "requests", where),
                env=_env(container),
                init=init,
            )
        )
    return PodView(
        ref=pod_ref(obj),
        annotations=annotations_of(obj),
        labels=labels_of(obj),
        containers=tuple(views),
        scheduler_name=_str(spec(obj).get("schedulerName")),
    )

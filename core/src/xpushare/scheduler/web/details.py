"""One node, one pod, a search: the web view's detail answers, from the scheduler's memory.

Everything here reads the usage ledger and the cluster state as they are between two awaits
of the scheduler's event loop (the web view calls it there: ``web/bridge.py``; nothing is
copied or locked); only a pod the scheduler does not count
(Pending, or bound without devices) and the events are read from the API server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xpushare.scheduler import objects as ob
from xpushare.scheduling import UNITS, FragmentationPolicy
from xpushare.scheduling.fragmentation import table_state

if TYPE_CHECKING:
    from xpushare.models import PodAssignment
    from xpushare.scheduler.cluster import ClusterState
    from xpushare.scheduling import NodeState, Policy, UsageLedger

#: Results of one search, per kind (nodes, pods, pending pods).
SEARCH_LIMIT = 50
#: Longest search text accepted (a namespace/name is at most 63 + 1 + 253).
MAX_QUERY_CHARS = 320
#: Pods of one namespace's task list at most (the answer says how many there are).
NAMESPACE_LIMIT = 500


def _share_rows(
    assignment: PodAssignment, who: dict[str, Any], vendor_of: dict[str, str]
) -> list[dict[str, Any]]:
    rows = []
    for c in assignment.containers:
        for s in c.devices:
            rows.append(
                {
                    **who,
                    "container": c.container,
                    "init": c.init,
                    "vendor": c.vendor,
                    "device_id": s.device_id,
                    "memory_mib": s.memory_mib,
                    "compute_percent": s.compute_percent,
                    "exclusive": s.exclusive,
                    "partition": s.partition,
                    "orphan": s.device_id not in vendor_of,
                }
            )
    return rows


def node_detail(
    state: NodeState, ledger: UsageLedger, cluster: ClusterState, policy: Policy
) -> dict[str, Any]:
    """A node's devices, each one's shares (pod, container, memory, compute, since), health."""
    devices = []
    vendor_of: dict[str, str] = {}
    frag = policy if isinstance(policy, FragmentationPolicy) else None
    fragmentation: dict[str, float] = {}
    for vendor in sorted(state.tables):
        table = state.tables[vendor]
        if frag is not None and table.devices:
            raw = frag.meter.table_raw(
                vendor, table_state(table), state.cpu_free, state.memory_free
            )
            fragmentation[vendor] = round(raw / frag.meter.workload.scale / UNITS, 4)
        for d in table.devices:
            vendor_of[d.id] = vendor
            devices.append(
                {
                    "vendor": vendor,
                    "id": d.id,
                    "index": d.index,
                    "model": d.model,
                    "healthy": d.healthy,
                    "numa": d.numa,
                    "memory_mib": d.memory_mib,
                    "memory_cap_mib": d.memory_cap,
                    "memory_used_mib": d.used_memory,
                    "compute_cap_percent": d.compute_cap,
                    "compute_used_percent": d.used_compute,
                    "slots": d.slots,
                    "slots_used": d.used_slots,
                    "exclusive": d.exclusive > 0,
                    "free_units": d.free_units(),
                }
            )
    shares: list[dict[str, Any]] = []
    for key in sorted(state.pods):
        entry = ledger.entry(key)
        if entry is None or entry.assignment is None:
            continue
        record = cluster.pods.get(key)
        who = {
            "namespace": record.ref.namespace if record else "",
            "pod": record.ref.name if record else "",
            "key": key,
            "since": record.since if record else None,
            "reserved": entry.reserved,
            "started": record.started if record else False,
        }
        shares.extend(_share_rows(entry.assignment, who, vendor_of))
    handoff = cluster.handoff(state.name)
    node_record = cluster.nodes.get(state.name)
    cpu = node_record.cpu_allocatable if node_record else None
    memory = node_record.memory_allocatable if node_record else None
    return {
        "name": state.name,
        "labels": dict(sorted(state.labels.items())),
        # The ledger books host resources only where it was told the node's allocatable (the
        # simulator); the scheduler's is the Node's, and its use is kube-scheduler's to book.
        "cpu_milli": {
            "allocatable": state.cpu_alloc if state.cpu_alloc is not None else cpu,
            "used": state.cpu_used if state.cpu_alloc is not None else None,
        },
        "memory_mib": {
            "allocatable": state.memory_alloc if state.memory_alloc is not None else memory,
            "used": state.memory_used if state.memory_alloc is not None else None,
        },
        "fragmentation_gpus": fragmentation if frag is not None else None,
        "devices": devices,
        "shares": shares,
        "handoff": (
            {
                "pod": str(handoff.pod),
                "vendors": list(handoff.vendors),
                # Served (its pod admitted): it stays until the next bind replaces it.
                "served": cluster.admitted_on(state.name, handoff.pod),
            }
            if handoff is not None
            else None
        ),
    }


def counted_pod(cluster: ClusterState, namespace: str, name: str) -> dict[str, Any] | None:
    """The assignment of a pod the scheduler counts (bound or being bound), else None."""
    record = cluster.pod_by_name(namespace, name)
    if record is None:
        return None
    entry = cluster.ledger.entry(record.key)
    if entry is None or entry.assignment is None:
        return None
    devices = {d.id: d for d in cluster.ledger.devices(entry.node)}
    containers = []
    for c in entry.assignment.containers:
        containers.append(
            {
                "container": c.container,
                "init": c.init,
                "vendor": c.vendor,
                "devices": [
                    {
                        **s.model_dump(exclude_none=True),
                        "model": devices[s.device_id].model if s.device_id in devices else None,
                        "index": devices[s.device_id].index if s.device_id in devices else None,
                    }
                    for s in c.devices
                ],
            }
        )
    return {
        "state": "binding" if entry.reserved else ("running" if record.started else "bound"),
        "node": entry.node,
        "since": record.since,
        "uid": record.ref.uid,
        "containers": containers,
    }


def event_rows(events: list[ob.Object]) -> list[dict[str, Any]]:
    """A pod's events, oldest first, the same event (type, reason, message, source) once
    with its counts summed and its latest time.

    Why merged: a Pending pod is refused again every minute in the same words (events.py
    sends a repeat after ``REPEAT_WINDOW_S``), and each is an Event of its own, so the page
    listed one long message a row per minute."""
    merged: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for e in events:
        count = e.get("count")
        row: dict[str, Any] = {
            "type": str(e.get("type") or ""),
            "reason": str(e.get("reason") or ""),
            "message": str(e.get("message") or "")[:2000],
            "count": count if isinstance(count, int) and count > 0 else 1,
            "time": str(
                e.get("lastTimestamp")
                or e.get("eventTime")
                or ob.meta(e).get("creationTimestamp")
                or ""
            ),
            "source": str(
                (e.get("source") or {}).get("component") or e.get("reportingComponent") or ""
            ),
        }
        key = (row["type"], row["reason"], row["message"], row["source"])
        seen = merged.get(key)
        if seen is None:
            merged[key] = row
        else:
            seen["count"] += row["count"]
            seen["time"] = max(seen["time"], row["time"])
    return sorted(merged.values(), key=lambda r: str(r["time"]))


def search(
    text: str, ledger: UsageLedger, cluster: ClusterState, pending: list[ob.Object]
) -> dict[str, Any]:
    """Nodes and pods whose name (or namespace/name) contains *text*, case-insensitively."""
    q = text.strip().lower()
    nodes = sorted(n for n in ledger.nodes if q in n.lower())
    pods = sorted(
        (
            {"namespace": r.ref.namespace, "pod": r.ref.name, "node": r.node}
            for r in cluster.pods.values()
            if q in f"{r.ref.namespace}/{r.ref.name}".lower()
        ),
        key=lambda p: (p["namespace"], p["pod"]),
    )
    waiting = sorted(
        (
            {"namespace": ob.namespace(p), "pod": ob.name(p), "node": ""}
            for p in pending
            if q in f"{ob.namespace(p)}/{ob.name(p)}".lower()
        ),
        key=lambda p: (p["namespace"], p["pod"]),
    )
    return {
        "query": text,
        "nodes": nodes[:SEARCH_LIMIT],
        "nodes_total": len(nodes),
        "pods": pods[:SEARCH_LIMIT],
        "pods_total": len(pods),
        "pending": waiting[:SEARCH_LIMIT],
        "pending_total": len(waiting),
    }


def namespace_tasks(namespace: str, ledger: UsageLedger, cluster: ClusterState) -> dict[str, Any]:
    """A namespace's pods with devices, each with its node and every device it holds
    (model, memory, compute), and the namespace's totals: HAMi-WebUI's task list."""
    records = sorted(
        (r for r in cluster.pods.values() if r.ref.namespace == namespace),
        key=lambda r: r.ref.name,
    )
    tasks = []
    memory = compute = devices_held = 0
    for record in records:
        entry = ledger.entry(record.key)
        if entry is None or entry.assignment is None:
            continue
        models = {d.id: d for d in ledger.devices(record.node)}
        held = []
        for c in entry.assignment.containers:
            for s in c.devices:
                device = models.get(s.device_id)
                held.append(
                    {
                        "container": c.container,
                        "vendor": c.vendor,
                        "device_id": s.device_id,
                        "model": device.model if device else None,
                        "memory_mib": s.memory_mib,
                        "compute_percent": s.compute_percent,
                        "exclusive": s.exclusive,
                    }
                )
                memory += s.memory_mib
                compute += s.compute_percent
        devices_held += len({h["device_id"] for h in held})
        tasks.append(
            {
                "pod": record.ref.name,
                "node": record.node,
                "since": record.since,
                "state": "binding"
                if entry.reserved
                else ("running" if record.started else "bound"),
                "devices": held,
            }
        )
    return {
        "namespace": namespace,
        "pods_total": len(tasks),
        "devices": devices_held,
        "memory_mib": memory,
        "compute_percent": compute,
        "pods": tasks[:NAMESPACE_LIMIT],
    }

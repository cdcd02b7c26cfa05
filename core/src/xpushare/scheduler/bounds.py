"""How much one request may ask of the scheduler: pods, candidate lists, the loop's time.

Why: every verb, the watches and the probes share one event loop (app.py), so what one
request costs is how long everything else waits. A pod of 10,000 one-GPU containers (about
1 MB, which the API server accepts) once held ``/filter`` on the loop for 9-14 s against
200 nodes, ``/healthz`` waiting as long; 100,000 ``NodeNames`` 0.3-0.9 s. So what a request
carries is bounded where it is read, before any per-container or per-node work, and the work
left is cut in slices that give the loop back between them (:func:`slices`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: Most containers one pod may have (``spec.initContainers``, ``spec.containers`` and
#: ``spec.ephemeralContainers`` together). Kubernetes sets no limit (the API server's 3 MiB
#: request cap allows some 30,000 small ones), but a pod is one workload with its helpers: a
#: main container and its sidecars (service mesh, log shipper, agents) are a handful, a few
#: dozen at the most. 256 is ten times the largest of those, and keeps the worst pod it lets
#: through (every container its own device demand) within :data:`LOOP_BUDGET_S` a slice.
MAX_POD_CONTAINERS = 256
#: Most candidate nodes one ``/filter`` or ``/prioritize`` may name (``NodeNames`` or
#: ``Nodes.items``). Kubernetes supports clusters of up to 5,000 nodes (its scalability
#: thresholds), and kube-scheduler sends an extender only the nodes its own filters kept,
#: stopping at ``percentageOfNodesToScore`` of them (at its adaptive default, at most 50 %
#: of a small cluster and 5 % of a large one: 3,250 of a 65,000-node one). 10,000 is twice
#: the supported size, so every cluster that works today keeps working, and bounds a call's
#: per-name work (some 3-9 µs a name) to what one slice may spend.
MAX_CANDIDATE_NODES = 10_000
#: The longest one request may hold the event loop, in seconds. kube-scheduler waits for
#: ``/filter`` inside its serial scheduling cycle (1-3 ms a call normally, bench_throughput);
#: 50 ms is what a decision may wait behind another request without the cycle's pace
#: changing visibly, and a tenth of the 0.5 s a probe's answer may take.
LOOP_BUDGET_S = 0.05
#: Units of work (a device demand checked against one node) done between two yields of a
#: sliced request. A demand on a node met for the first time walks the node's devices (the
#: fit, then the never-fits test of scheduler/extender.py: 2-4 µs a demand on 8 devices), so
#: 1,024 units are a few milliseconds a slice even when every node is in its own state: a
#: pod at :data:`MAX_POD_CONTAINERS`, each container a demand of its own kind, took 17-51 ms
#: a slice at 4,096 (bench_looplag's what-if), 3-8 ms at 1,024.
SLICE_WORK = 1_024


def pod_too_large(obj: Any, who: str = "") -> str | None:
    """Why the pod *obj* is too large to consider (``None``: it is not).

    Read from the raw object before any container is parsed: the lengths of its three
    container lists, nothing per container. The message names the fields, the limit, and
    what to do.
    """
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return None
    counts = {}
    for field in ("initContainers", "containers", "ephemeralContainers"):
        items = spec.get(field)
        counts[field] = len(items) if isinstance(items, list) else 0
    total = sum(counts.values())
    if total <= MAX_POD_CONTAINERS:
        return None
    parts = " + ".join(f"{n:,} in spec.{field}" for field, n in counts.items() if n)
    who = who or "the pod"
    return (
        f"{who} has {total:,} containers ({parts}), more than the {MAX_POD_CONTAINERS} "
        "xpushare considers in one pod (spec.initContainers, spec.containers and "
        "spec.ephemeralContainers together): split the work into several pods (a Job's or "
        "a Deployment's replicas)"
    )


def too_many_candidates(count: int, field: str) -> str | None:
    """Why *count* candidate nodes (in the request's *field*) are too many, else ``None``."""
    if count <= MAX_CANDIDATE_NODES:
        return None
    return (
        f"{field}: {count:,} candidate nodes, more than the {MAX_CANDIDATE_NODES:,} xpushare "
        "considers in one call (twice the 5,000 nodes Kubernetes supports); lower "
        "kube-scheduler's percentageOfNodesToScore so that it sends fewer"
    )


def slices(names: list[str], demands: int) -> Iterator[list[str]]:
    """*names* in consecutive slices of about :data:`SLICE_WORK` units of work each, for a
    request of *demands* device demands (at least one node a slice)."""
    step = max(1, SLICE_WORK // max(1, demands))
    for start in range(0, len(names), step):
        yield names[start : start + step]


def heavy(names: int, demands: int) -> bool:
    """Whether a request of *demands* device demands over *names* nodes is worth slicing
    (more than one slice of work): the common pod (one demand, 500 candidates) is not."""
    return names * max(1, demands) > SLICE_WORK and demands > 1

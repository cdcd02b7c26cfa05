"""A watch of the real API server read as raw JSON, resumed until it is told to stop: what the
stand-in kubelets (:class:`~xpushare.testing.realcluster.standins.KubeletStandin`) and the
benchmark's bound-pod counter (benchmarks/bench_realcluster.py) follow.

Why raw: both share the cores of the benchmark with the control plane and our scheduler, and the
Kubernetes client's model objects of every event cost several milliseconds of CPU a pod there
(2026-12-06). Why not our scheduler's informer: it is asyncio and keeps a store; these are
threads that only look at each event once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: Seconds the loop waits before watching again after a failed request (the API server
#: restarting, a connection cut): short, as the tests that restart it wait on these watches.
RETRY_S = 0.1

#: What a watch hands on: the event's type, its object and the object's metadata.
Seen = Callable[[str, dict[str, Any], dict[str, Any]], None]


def raw_watch(
    lister: Callable[..., Any],
    seen: Seen,
    stop: threading.Event,
    *,
    timeout_s: int = 1,
    field_selector: str = "",
    label_selector: str = "",
) -> None:
    """Follow the watch of *lister* (a list call of the Kubernetes client, e.g.
    ``core.list_node``) until *stop* is set, handing every event to *seen*.

    Each stream lasts *timeout_s* (how long a stop may take) and is resumed from the last
    resourceVersion seen; after 410 Gone (etcd compacted past it) from the current objects,
    which a watch without a version sends first as ADDED; after any other failure again
    after :data:`RETRY_S`.
    """
    import orjson

    version = ""
    while not stop.is_set():
        options: dict[str, Any] = {"watch": True, "timeout_seconds": timeout_s}
        if version:
            options["resource_version"] = version
        if field_selector:
            options["field_selector"] = field_selector
        if label_selector:
            options["label_selector"] = label_selector
        try:
            response = lister(_preload_content=False, **options)
            try:
                for line in response:
                    event = orjson.loads(line)
                    obj = event.get("object") or {}
                    kind = event.get("type") or ""
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            version = ""
                        break
                    meta = obj.get("metadata") or {}
                    version = meta.get("resourceVersion") or version
                    seen(kind, obj, meta)
                    if stop.is_set():
                        break
            finally:
                response.close()  # a stream left early: its connection is not reused
        except Exception:
            stop.wait(RETRY_S)


__all__ = ["RETRY_S", "Seen", "raw_watch"]

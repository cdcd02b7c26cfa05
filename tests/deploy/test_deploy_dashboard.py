"""The Grafana dashboard queries only metrics the scheduler and the node agent export.

The metric names come from the code's own registries, rendered the way Prometheus scrapes
them (``_total`` for counters, ``_bucket`` for histograms), so a renamed metric breaks here.
"""

from __future__ import annotations

import json
import re

from chartkit import CHART, REPO
from prometheus_client import generate_latest

from xpushare.node.metrics import AgentMetrics, MonitorStore
from xpushare.scheduler.metrics import SchedulerMetrics

DASHBOARD = CHART / "files" / "dashboards" / "xpushare.json"
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
    "untyped": ("",),
}


def exported() -> set[str]:
    """Every series name the two processes expose (families with no sample included)."""
    texts = [
        SchedulerMetrics().render([]),
        generate_latest(
            AgentMetrics(
                node="n1", vendors={}, monitor=MonitorStore(max_age_s=60), plugins=list
            ).registry
        ),
    ]
    names: set[str] = set()
    for text in texts:
        for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text.decode(), re.M):
            base = name.removesuffix("_total") if kind == "counter" else name
            names.update(base + suffix for suffix in _SUFFIXES.get(kind, ("",)))
    return names


def expressions(dashboard: dict) -> list[str]:
    found = []
    for panel in dashboard["panels"]:
        found.extend(t["expr"] for t in panel.get("targets", []))
    for variable in dashboard["templating"]["list"]:
        if isinstance(variable.get("query"), dict):
            found.append(variable["query"]["query"])
    return found


def test_every_queried_metric_is_exported_by_the_code():
    dashboard = json.loads(DASHBOARD.read_text())
    names = exported()
    queried = {m for e in expressions(dashboard) for m in re.findall(r"\bxpushare_[a-z_]+", e)}
    assert queried, "the dashboard queries nothing"
    assert sorted(queried - names) == []


def test_the_dashboard_covers_both_processes_and_every_panel_has_a_query():
    dashboard = json.loads(DASHBOARD.read_text())
    queried = " ".join(expressions(dashboard))
    assert "xpushare_scheduler_request_duration_seconds_bucket" in queried
    assert "xpushare_allocate_duration_seconds_bucket" in queried
    assert "xpushare_container_memory_used_bytes" in queried
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_deploy_dashboards_points_at_the_charts_copy():
    assert (REPO / "deploy" / "dashboards" / "xpushare.json").resolve() == DASHBOARD.resolve()

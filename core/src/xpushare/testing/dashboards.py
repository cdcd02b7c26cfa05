"""What a Grafana dashboard's PromQL queries read: metric names and the labels used on each.

For tests that check a dashboard works against what we export: every metric a query names
must be exported, with every label the query selects on, groups by, joins on or lists.
Enough PromQL for dashboards (selectors, ``by``/``on``/``ignoring``/``without`` lists,
``label_values(metric, label)``, ``label_values(metric{...}, label)`` and
``label_values({__name__=~"a|b"}, label)``), not a full parser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SELECTOR = re.compile(rf"({_NAME})\s*\{{([^}}]*)\}}")
_BARE = re.compile(rf"\b({_NAME})\b(?!\s*\()")
_MATCHER = re.compile(rf"({_NAME})\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|on|ignoring|without)\s*\(([^)]*)\)")
_LABEL_VALUES = re.compile(rf"label_values\(\s*({_NAME})\s*(?:\{{[^}}]*\}})?\s*,\s*({_NAME})\s*\)")
#: ``label_values({__name__=~"a|b"}, label)``: the metrics named by the regex's alternatives.
_LABEL_VALUES_OF_NAMES = re.compile(
    rf'label_values\(\s*\{{\s*__name__\s*=~?\s*"([^"]*)"[^}}]*\}}\s*,\s*({_NAME})\s*\)'
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_KEYWORDS = frozenset(
    {
        "by",
        "on",
        "ignoring",
        "without",
        "and",
        "or",
        "unless",
        "bool",
        "group_left",
        "group_right",
        "offset",
    }
)


_LEGEND = re.compile(rf"\{{\{{\s*({_NAME})\s*\}}\}}")


def queries(dashboard: Any) -> Iterator[tuple[str, set[str]]]:
    """Every ``expr`` and templating ``query`` string of a dashboard's JSON, with the labels
    its ``legendFormat`` shows (``{{pod}}``)."""
    if isinstance(dashboard, dict):
        legend = dashboard.get("legendFormat")
        shown = set(_LEGEND.findall(legend)) if isinstance(legend, str) else set()
        for key, value in dashboard.items():
            if key in ("expr", "query") and isinstance(value, str):
                yield value, shown
            elif key == "query" and isinstance(value, dict) and isinstance(value.get("query"), str):
                yield value["query"], set()
            else:
                yield from queries(value)
    elif isinstance(dashboard, list):
        for item in dashboard:
            yield from queries(item)


def metrics_used(path: Path, prefix: str | tuple[str, ...]) -> dict[str, set[str]]:
    """Per metric named with *prefix* (or one of several) in the dashboard at *path*, the
    labels its queries use."""
    out: dict[str, set[str]] = {}
    for query, shown in queries(json.loads(path.read_text())):
        for metric, label in _LABEL_VALUES.findall(query):
            if metric.startswith(prefix):
                out.setdefault(metric, set()).add(label)
        for names, label in _LABEL_VALUES_OF_NAMES.findall(query):
            for metric in names.split("|"):
                if re.fullmatch(_NAME, metric) and metric.startswith(prefix):
                    out.setdefault(metric, set()).add(label)
        text = _STRING.sub('""', query)
        names = [m for m in _BARE.findall(text) if m.startswith(prefix) and m not in _KEYWORDS]
        labels: set[str] = set(shown)
        for metric, matchers in _SELECTOR.findall(text):
            if metric.startswith(prefix):
                out.setdefault(metric, set()).update(_MATCHER.findall(matchers))
        for group in _GROUPING.findall(text):
            labels.update(part.strip() for part in group.split(",") if part.strip())
        for metric in names:
            out.setdefault(metric, set()).update(labels)
    return out

"""Allocated versus used device memory over time, fleet-wide, from Prometheus.

The scheduler keeps no history of its own: its gauge of booked memory
(``xpushare_scheduler_device_memory_allocated_mib``, scheduler/metrics.py) and the node
agents' memory in use (``xpushare_device_memory_used_bytes``, node/metrics.py) are scraped
by the Prometheus the node page already reads (live.py), and two range queries over them
give the chart. Its answer is read as hostile input: bounded by live.py's client, and here
every series, point, time and value checked.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from xpushare.scheduler.web.live import LiveUnavailable, LiveUsage

#: Points per series at most: a chart some 600 pixels wide gains nothing past this, and it
#: keeps Prometheus' work and the answer small whatever range is asked.
MAX_POINTS = 240
#: The range a caller may ask for, in minutes: from a few scrapes (Prometheus' default
#: scrape interval is 1 min) to a week, beyond which a default retention (15 days) and the
#: coarse step say little.
MIN_MINUTES = 5
MAX_MINUTES = 7 * 24 * 60
DEFAULT_MINUTES = 60
#: Finest step: Prometheus' own default scrape interval is 1 min, commonly lowered to 15 s.
MIN_STEP_S = 15
MIB = 1024 * 1024

#: ``max by`` the device before the sum: every scheduler replica exports the booked memory
#: (followers mirror the ledger) and a node agent may be scraped by more than one job; the
#: same device counted twice would double the line.
QUERIES = {
    "allocated_mib": "sum(max by (node, vendor, device) "
    "(xpushare_scheduler_device_memory_allocated_mib))",
    "used_mib": f"sum(max by (node, device) (xpushare_device_memory_used_bytes)) / {MIB}",
}
#: Where the page and the answer tell an operator to turn history on.
SETTING = "web.prometheus_url (Helm: web.prometheusURL)"


class BadRange(ValueError):
    """The range asked for is not one this endpoint answers; the message names the field."""


def parse_minutes(query: Mapping[str, str]) -> int:
    """The ``minutes`` parameter, checked."""
    raw = query.get("minutes")
    if raw is None or raw == "":
        return DEFAULT_MINUTES
    if len(raw) > 6 or not raw.isascii() or not raw.isdigit():
        return _refuse(raw[:20])
    minutes = int(raw)
    if not MIN_MINUTES <= minutes <= MAX_MINUTES:
        return _refuse(raw)
    return minutes


def _refuse(raw: str) -> int:
    raise BadRange(
        f"minutes: {raw!r} is not a whole number from {MIN_MINUTES} to {MAX_MINUTES}"
        f" (the last N minutes to chart)"
    )


def step_for(minutes: int) -> int:
    """Seconds between points so that a range of *minutes* has at most MAX_POINTS of them
    (Prometheus answers ``range / step + 1`` points)."""
    return max(MIN_STEP_S, math.ceil(minutes * 60 / (MAX_POINTS - 1)))


def series_points(result: list[dict[str, Any]], start: float, end: float) -> list[list[float]]:
    """The points of a one-series answer as ``[unix seconds, value]``, in time order.

    A ``sum`` answers one series, or none when nothing has been scraped; more is not an
    answer to our query. Points outside the range, past MAX_POINTS, or whose time or value
    is not a finite number are dropped (the JSON answer must stay valid: no NaN)."""
    if not result:
        return []
    if len(result) > 1:
        raise LiveUnavailable(f"Prometheus answer not understood: {len(result)} series for a sum")
    values = result[0].get("values")
    if not isinstance(values, list):
        raise LiveUnavailable("Prometheus answer not understood: the series has no values list")
    points: list[list[float]] = []
    for pair in values[: MAX_POINTS + 1]:
        if not isinstance(pair, list) or len(pair) != 2:
            continue
        at, text = pair
        if not isinstance(at, int | float) or isinstance(at, bool) or not isinstance(text, str):
            continue
        try:
            value = float(text[:40])
        except ValueError:
            continue
        if math.isfinite(at) and math.isfinite(value) and start <= at <= end:
            points.append([float(at), value])
    points.sort(key=lambda p: p[0])
    return points[:MAX_POINTS]


async def memory_history(live: LiveUsage, minutes: int, now: float | None = None) -> dict[str, Any]:
    """Both series over the last *minutes*, the range aligned to the step so that repeated
    calls ask Prometheus for the same points."""
    step = step_for(minutes)
    end = math.floor((time.time() if now is None else now) / step) * step
    start = end - minutes * 60
    series = {}
    for name, query in QUERIES.items():
        series[name] = series_points(await live.query_range(query, start, end, step), start, end)
    return {
        "configured": True,
        "minutes": minutes,
        "step_s": step,
        "start": start,
        "end": end,
        "series": series,
    }

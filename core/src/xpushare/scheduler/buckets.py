"""Histogram buckets shared by the scheduler's latency metrics (one module, so the loop's
lag and a request's time are read on the same scale)."""

from __future__ import annotations

#: Request latency buckets: the targets are 5 ms (/filter at 500 nodes), 10 ms (webhook) and
#: 20 ms (/filter at 5,000 nodes); /bind may wait up to the handoff wait (10 s).
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)

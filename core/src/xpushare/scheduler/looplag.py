"""How late the scheduler's event loop runs what is due: its lag, measured from inside.

Why: the extender's verbs, the webhook, the watches and the probes share one loop (app.py),
so a request that holds it delays every other; the request histograms time each request by
itself and cannot show that. A timer due every :data:`TICK_S` records how late it fired in
``xpushare_scheduler_loop_lag_seconds``: what a request arriving at that moment waited
before the loop could read it. ``benchmarks/bench_looplag.py`` reads its p99.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from xpushare.scheduler.buckets import LATENCY_BUCKETS

#: How often the lag is sampled. 50 wakes a second cost some 0.1 % of a core, and a stall
#: of the 50 ms a request may hold the loop (scheduler/bounds.py) is met by two samples.
TICK_S = 0.02
#: Buckets of the lag histogram: the request latency's (metrics.py) less its 0.5 ms one, a
#: tick's own timer resolution being about that; 50 ms is the bound a request may hold the
#: loop; seconds are what defects looked like before.
LAG_BUCKETS = LATENCY_BUCKETS[1:]


class Observer(Protocol):
    def observe(self, amount: float) -> None: ...


async def watch_lag(histogram: Observer, tick_s: float = TICK_S) -> None:
    """Observe the loop's lateness every *tick_s*, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + tick_s
        await asyncio.sleep(tick_s)
        histogram.observe(max(0.0, loop.time() - due))

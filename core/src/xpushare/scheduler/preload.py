"""The modules a process's first decision would import, imported at start in a thread.

Why: the first ``/filter`` of a scheduler (or filter worker) built its candidate rows
(scheduler/candidates.py), and so imported numpy and the batch search, on the event loop
every request shares, while kube-scheduler's scheduling cycle waited on it: 2.3 % of a
1,000-pod benchmark's samples, some 0.6 s at once on the benchmark's shared cores (py-spy,
docs/benchmarks.md, session 14). At start the informers are still listing and nothing waits
for a decision, so the import is done then, off the loop. A ``/filter`` that comes first
waits on the import lock for what is left, as it would have imported anyway.
"""

from __future__ import annotations

import asyncio
import importlib
import logging

log = logging.getLogger(__name__)

#: What the first decision imports that nothing before it does (numpy for the candidate rows,
#: the fragmentation policies' array search).
DECISION_MODULES = ("numpy", "xpushare.scheduling.fragarrays", "xpushare.scheduling.fragbatch")


def import_decision_modules() -> None:
    for name in DECISION_MODULES:
        importlib.import_module(name)


async def preload() -> None:
    """:func:`import_decision_modules` in a thread; a failure is logged, and the first
    decision meets it again and reports it where it belongs."""
    try:
        await asyncio.to_thread(import_decision_modules)
    except Exception as exc:  # an import error: the decision that needs it says so
        log.warning("could not import the decision modules ahead of time: %s", exc)

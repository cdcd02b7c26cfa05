"""The FGD paper's evaluation protocol, "workload inflation" (Weng et al., ATC'23, §6.1).

The tasks of the trace are shuffled with a seed; tasks drawn from the trace at random, with
replacement, are appended until the next one would push the total GPU demand past
``inflation`` times the fleet's capacity (1.3 in the paper; random tasks are dropped if the
trace already asks more). The tasks then arrive one by one and never leave, and the metric is
the share of the fleet's GPUs allocated as a function of the GPU demand arrived so far; its
value when arrivals reach 100 % of capacity is the headline figure.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from xpushare.simulator.trace import TaskSpec

#: The paper's inflation factor (their ``-tune 1.3``).
DEFAULT_INFLATION = 1.3
#: The paper's first seed (runs used 42 to 51).
DEFAULT_SEED = 42


def arrivals(
    tasks: Sequence[TaskSpec],
    capacity_gpus: float,
    *,
    seed: int = DEFAULT_SEED,
    inflation: float = DEFAULT_INFLATION,
) -> list[TaskSpec]:
    """The order in which tasks arrive: shuffled, then inflated (or trimmed) to the target."""
    if inflation <= 0:
        raise ValueError(f"inflation must be > 0, got {inflation}")
    rng = random.Random(seed)
    order = list(tasks)
    rng.shuffle(order)
    if not any(t.gpus for t in order):
        return order
    target = inflation * capacity_gpus
    total = sum(t.gpus for t in order)
    if total < target:
        n = 0
        while True:
            pick = tasks[rng.randrange(len(tasks))]
            if total + pick.gpus > target:
                break
            n += 1
            order.append(replace(pick, name=f"{pick.name}-x{n}"))
            total += pick.gpus
    else:
        while total > target and order:
            gone = order.pop(rng.randrange(len(order)))
            total -= gone.gpus
    return order

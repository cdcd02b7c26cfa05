"""The workload a fragmentation policy weighs nodes by: task shapes and their frequencies.

A :class:`Workload` is either given (the simulator passes the trace's, the FGD paper's
"typical pods") or learnt by the policy from the pods it is asked about, with
:class:`LearntWorkload`.

Why the learnt model is not simply a count of every request seen: a scheduler runs for
months and real clusters ask many distinct memory sizes (every notebook its own), so one
entry per distinct request grows without end, and FGD's cost per node state grows with the
number of shapes it weighs. The learnt model therefore has a fixed memory ceiling and costs
the same per pod after a million pods as after ten:

* **quantised shapes**: device memory, CPU and device count keep their
  :data:`SHAPE_BITS` leading bits, rounded up (at most 12.5 % above the request, 8 steps per
  doubling), so requests a few MiB apart are one shape; UUID constraints, which the measure
  never reads (it looks at device states, not identities), are dropped;
* **decayed counts**: a pod counts ``2^(t / HALF_LIFE_PODS)`` at its arrival ``t``, so a pod
  :data:`HALF_LIFE_PODS` pods old weighs half a new one and the model follows a changing
  workload; the growing increment makes this O(1) per pod (everything is rescaled once in a
  long while, before floats could overflow); a shape whose count fell below
  :data:`FORGOTTEN` of one new pod's is dropped at the next refresh;
* **a capped table**: at most :data:`MAX_LEARNT_SHAPES` shapes are counted; a new shape then
  replaces the least counted one, which the decay would forget first anyway;
* **periodic, tolerant refreshes**: every :data:`REFRESH_EVERY` pods (and after 1, 2, 4, ...
  pods before that, so a new scheduler learns quickly) the counts become a workload of at
  most :data:`MAX_WORKLOAD_SHAPES` shapes, which replaces the policy's only when it moved
  by more than :data:`MODEL_TOLERANCE` (every replacement makes the engine work out its
  answers again);
* **a bounded share per shape**: no shape weighs more than :data:`MAX_SHAPE_SHARE` of the
  workload (the others renormalised), so a tenant flooding the scheduler with one shape
  cannot tilt FGD towards it while other pods still arrive; no openb trace comes near the
  bound, so real workloads are learnt as they are. Only a workload of one shape weighs it
  fully, which is also what a cluster whose other shapes stopped comes to once they are
  forgotten.

Quantising applies to learnt shapes only: a given workload is used exactly as given, so the
simulator decides as before.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from xpushare.scheduling.request import Demand

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from xpushare.scheduling.request import PodRequest

#: Share of the tasks the representative shapes must cover: the FGD simulator's
#: ``podPopularityThreshold`` of the paper's runs (95 %), taken in order of popularity.
DEFAULT_COVERAGE = 0.95

#: Leading bits a learnt shape keeps of its device memory, CPU and device count: 8 steps per
#: doubling, so a learnt shape asks at most 12.5 % more than the pods it stands for, and the
#: memory sizes from 1 MiB to 16 TiB are some 200 shapes at most.
SHAPE_BITS = 4
#: Shapes the learnt model counts at most (a table of this many entries, a few KiB each).
#: Four times :data:`MAX_WORKLOAD_SHAPES`, so shapes below the workload's cut can still grow
#: into it before they are forgotten.
MAX_LEARNT_SHAPES = 256
#: Shapes a learnt workload weighs at most; FGD's cost per node state grows with it. Twice
#: the 33 shapes that cover 95 % of the embedded openb sample (`xpushare simulate`).
MAX_WORKLOAD_SHAPES = 64
#: Pods after which a learnt pod counts half: the model follows a workload that changes over
#: some ten thousand pods (hours to days of a busy cluster), and one burst does not erase it.
HALF_LIFE_PODS = 10_000
#: Pods between two refreshes of the learnt workload, once past the first ones.
REFRESH_EVERY = 1_024
#: Pods after which a failed refresh is tried again.
RETRY_AFTER = 64
#: Total variation distance (half the sum of the weights' differences) below which a new
#: learnt workload with the same shapes is not worth the answers it would invalidate.
MODEL_TOLERANCE = 0.05
#: Largest share of a learnt workload one shape may weigh; above it, the shape is lowered to
#: this share and the others renormalised. Measured with ``scripts/learnt-shape-shares`` on
#: the 17 openb traces (quantised as learnt, decayed as learnt, at every refresh): the most
#: weighed shape reaches 0.574 (the gpushare traces, 16 to 64 pods in), 0.352 past 1,024
#: pods (cpu250), 0.315 over a whole trace (gpushare100). 0.6 is above all of them, so a
#: real workload is learnt unchanged; above 1/2, so at most one shape is ever lowered.
MAX_SHAPE_SHARE = 0.6
#: Count, in new pods, under which a shape is forgotten: one pod after log2(100) = 6.6
#: half-lives (66,000 pods), 1,000 pods after 16.6. A steady workload's counts sum to some
#: ``HALF_LIFE_PODS / ln 2`` = 14,427 new pods, so a forgotten shape weighed under a
#: millionth of it; forgetting it matters where :data:`MAX_SHAPE_SHARE` would otherwise give
#: it a share of the workload again (a cluster whose pods have all become one shape).
FORGOTTEN = 0.01
#: Characters of model names a learnt shape may carry (a pod's ``use-model`` lists); a pod
#: naming more is not learnt from, so no pod can make the model's entries large.
MAX_CONSTRAINT_CHARS = 256
#: Integer weights of a learnt workload: counts scaled so the largest is this. Integers keep
#: the meters' sums exact in any order (the batch and scalar searches agree to the bit); at
#: 2^20 x 64 shapes x 1,000 units x 16 devices they stay far below float64's 2^53.
WEIGHT_SCALE = 2**20
# Increment bound before the counts are rescaled (floats reach 1e308; this is far below).
_RESCALE_AT = 2.0**64


@dataclass(frozen=True, slots=True)
class TaskShape:
    """What one kind of task asks: one device demand (or none), CPU and host memory."""

    vendor: str | None
    key: tuple[Any, ...] | None
    cpu_milli: int = 0
    memory_mib: int = 0
    demand: Demand | None = field(default=None, compare=False, hash=False)

    @classmethod
    def of(cls, request: PodRequest, *, host_memory: bool = False) -> TaskShape:
        """The shape of a pod: its first app device demand (or init, or none) and CPU.

        Host memory is left out unless asked, as in the paper's typical pods (CPU and
        GPU only), which keeps the number of shapes small.
        """
        demands = request.app or request.init
        demand = demands[0] if demands else None
        return cls(
            vendor=demand.vendor if demand else None,
            key=demand.key if demand else None,
            cpu_milli=request.cpu_milli,
            memory_mib=request.memory_mib if host_memory else 0,
            demand=demand,
        )


class Workload:
    """Task shapes and how often each occurs (weights sum to 1)."""

    def __init__(
        self,
        shapes: Sequence[TaskShape],
        weights: Sequence[float],
        below: Sequence[tuple[TaskShape, float]] = (),
    ) -> None:
        if len(shapes) != len(weights):
            raise ValueError("a workload needs one weight per shape")
        total = float(sum(weights))
        if any(w < 0 for w in weights) or (shapes and total <= 0):
            raise ValueError("workload weights must be >= 0 and not all 0")
        self.shapes = tuple(shapes)
        #: The weights as given (task counts, for a learnt or traced workload): the meters
        #: sum with these and divide once, so sums of integers stay exact in any order.
        self.raw = tuple(float(w) for w in weights)
        self.scale = total if shapes else 1.0
        self.weights = tuple(w / total for w in weights) if shapes else ()
        self.max_cpu = max((s.cpu_milli for s in self.shapes), default=0)
        self.max_memory = max((s.memory_mib for s in self.shapes), default=0)
        #: The shapes the cut left out (coverage or limit) with their weights, most
        #: frequent first. FGD never reads them; ``fgd-cpu`` takes back those that few
        #: nodes can host (:func:`~xpushare.scheduling.hostaware.with_rare_hosts`).
        self.below = tuple(below)

    @classmethod
    def from_counts(
        cls,
        counts: Mapping[TaskShape, float],
        coverage: float = DEFAULT_COVERAGE,
        *,
        limit: int | None = None,
    ) -> Workload:
        """The most frequent shapes covering *coverage* of all tasks (at most *limit*),
        renormalised."""
        if not 0 < coverage <= 1:
            raise ValueError(f"coverage must be in (0, 1], got {coverage}")
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], _order_key(kv[0])))
        total = sum(counts.values())
        shapes: list[TaskShape] = []
        weights: list[float] = []
        covered = 0.0
        below: list[tuple[TaskShape, float]] = []
        for shape, n in ranked:
            if below or covered >= coverage * total or (limit is not None and len(shapes) >= limit):
                below.append((shape, n))
                continue
            shapes.append(shape)
            weights.append(n)
            covered += n
        return cls(shapes, weights, below)

    @classmethod
    def from_requests(
        cls,
        requests: Iterable[PodRequest],
        coverage: float = DEFAULT_COVERAGE,
        *,
        host_memory: bool = False,
    ) -> Workload:
        counts: Counter[TaskShape] = Counter(
            TaskShape.of(r, host_memory=host_memory) for r in requests
        )
        return cls.from_counts(counts, coverage)

    def __len__(self) -> int:
        return len(self.shapes)

    def distance(self, other: Workload) -> float:
        """Total variation distance to *other* (0: same shapes and weights, 1: disjoint)."""
        mine = dict(zip(self.shapes, self.weights, strict=True))
        theirs = dict(zip(other.shapes, other.weights, strict=True))
        return 0.5 * sum(abs(mine.get(s, 0.0) - theirs.get(s, 0.0)) for s in mine.keys() | theirs)

    def describe(self) -> list[tuple[str, float]]:
        out = []
        for s, w in zip(self.shapes, self.weights, strict=True):
            d = s.demand
            if d is None:
                what = "no devices"
            elif d.exclusive:
                what = f"{d.count} whole {d.vendor}"
            else:
                what = f"{d.count} x {d.memory_percent or d.memory_mib}/{d.compute} {d.vendor}"
            out.append((f"{what}, {s.cpu_milli / 1000:g} CPU", w))
        return out


def _order_key(shape: TaskShape) -> tuple[Any, ...]:
    return (shape.cpu_milli, repr(shape.key), shape.memory_mib)


def coarse(n: int) -> int:
    """*n* rounded up to its :data:`SHAPE_BITS` leading bits (at most 12.5 % more)."""
    excess = n.bit_length() - SHAPE_BITS
    if excess <= 0:
        return n
    step = 1 << excess
    return -(-n // step) * step


def learnt_shape(request: PodRequest) -> TaskShape | None:
    """The quantised shape a pod counts for in a learnt workload (``None``: not learnt).

    The measure reads a shape's demand through the device signatures only
    (:func:`~xpushare.scheduling.fit.sig_can_host`), which hold no device identities, so
    UUID constraints are dropped; a pod naming more model text than
    :data:`MAX_CONSTRAINT_CHARS` is not learnt from.
    """
    demands = request.app or request.init
    cpu = coarse(request.cpu_milli)
    if not demands:
        return TaskShape(vendor=None, key=None, cpu_milli=cpu)
    first = demands[0]
    asked = first.request
    if sum(map(len, (*asked.models_include, *asked.models_exclude))) > MAX_CONSTRAINT_CHARS:
        return None
    memory = asked.memory_mib
    quantised = asked.model_copy(
        update={
            "count": coarse(asked.count),
            "memory_mib": None if memory is None else coarse(memory),
            "uuids_include": (),
            "uuids_exclude": (),
        }
    )
    demand = Demand(quantised, init=first.init)
    return TaskShape(vendor=demand.vendor, key=demand.key, cpu_milli=cpu, demand=demand)


def bounded_top(top: float, rest: float, share: float) -> Fraction | None:
    """The weight *top* is lowered to so it is *share* of the whole (``top + rest``), or
    ``None`` when it is within that share already or nothing else is weighed (a workload of
    one shape weighs it fully). Exact (a fraction), so a weight rounded down from it stays
    within *share*."""
    bound, whole = Fraction(share), Fraction(top) + Fraction(rest)
    if rest <= 0 or Fraction(top) <= bound * whole:
        return None
    return bound * Fraction(rest) / (1 - bound)


class LearntWorkload:
    """Decayed counts of quantised pod shapes, in a table of at most ``capacity`` shapes.

    :meth:`observe` costs O(1) but for a new shape in a full table, which scans the table
    once (:data:`MAX_LEARNT_SHAPES` entries) for the least counted one.
    """

    def __init__(
        self,
        coverage: float = DEFAULT_COVERAGE,
        *,
        capacity: int = MAX_LEARNT_SHAPES,
        limit: int = MAX_WORKLOAD_SHAPES,
        half_life: float = HALF_LIFE_PODS,
        refresh_every: int = REFRESH_EVERY,
        max_share: float = MAX_SHAPE_SHARE,
    ) -> None:
        if not 0 < coverage <= 1:
            raise ValueError(f"coverage must be in (0, 1], got {coverage}")
        if capacity < 1 or limit < 1 or half_life <= 0 or refresh_every < 1:
            raise ValueError("capacity, limit, half_life and refresh_every must be positive")
        if not 0.5 < max_share <= 1:
            # Above 1/2 only one shape can exceed it: lowering that one is the whole cap.
            raise ValueError(f"max_share must be in (0.5, 1], got {max_share}")
        self.coverage = coverage
        self.max_share = max_share
        self.capacity = capacity
        self.limit = limit
        self.refresh_every = refresh_every
        self._growth = 2.0 ** (1.0 / half_life)
        self._increment = 1.0
        self.counts: dict[TaskShape, float] = {}
        #: Pods observed, learnt from or not.
        self.seen = 0
        #: Pods not learnt from (constraints too large to keep).
        self.skipped = 0
        self._next_refresh = 1

    def __len__(self) -> int:
        return len(self.counts)

    def observe(self, request: PodRequest) -> bool:
        """Count *request*; ``True`` when a refresh of the workload is due."""
        self.seen += 1
        shape = learnt_shape(request)
        if shape is None:
            self.skipped += 1
        else:
            self._count(shape)
        return self.seen >= self._next_refresh

    def _count(self, shape: TaskShape) -> None:
        counts = self.counts
        found = counts.get(shape)
        if found is not None:
            counts[shape] = found + self._increment
        else:
            if len(counts) >= self.capacity:
                del counts[min(counts, key=counts.__getitem__)]
            counts[shape] = self._increment
        self._increment *= self._growth
        if self._increment > _RESCALE_AT:
            # Every count scaled alike: the ranking and the weights' ratios are unchanged.
            scale = self._increment
            for key in counts:
                counts[key] /= scale
            self._increment = 1.0

    def workload(self) -> Workload:
        """The most counted shapes covering ``coverage``, at most ``limit`` of them, with
        integer weights (see :data:`WEIGHT_SCALE`), none above ``max_share``; the next
        refresh is scheduled."""
        self._next_refresh = min(2 * self.seen, self.seen + self.refresh_every)
        counts = self.counts
        stale = [shape for shape, n in counts.items() if n < FORGOTTEN * self._increment]
        for shape in stale:
            del counts[shape]
        if not counts:
            return Workload([], [])
        # Bounded among all counted shapes first, so the coverage cut takes the others in
        # (a shape of 96 % would cover the 95 % alone), then among those the cut kept.
        most = max(counts, key=counts.__getitem__)
        lowered = bounded_top(counts[most], sum(counts.values()) - counts[most], self.max_share)
        if lowered is not None:
            counts = {**counts, most: float(lowered)}
        top = max(counts.values())
        scaled = {
            shape: w
            for shape, n in counts.items()
            if (w := math.floor(n / top * WEIGHT_SCALE + 0.5)) > 0
        }
        cut = Workload.from_counts(scaled, self.coverage, limit=self.limit)
        first, *others = cut.raw  # from_counts ranks the most weighed first
        lowered = bounded_top(first, sum(others), self.max_share)
        if lowered is None:
            return cut
        return Workload(cut.shapes, (math.floor(lowered), *others), cut.below)

    def retry_later(self) -> None:
        """A refresh failed: try again after :data:`RETRY_AFTER` more pods."""
        self._next_refresh = self.seen + RETRY_AFTER


__all__ = [
    "DEFAULT_COVERAGE",
    "FORGOTTEN",
    "MAX_SHAPE_SHARE",
    "LearntWorkload",
    "TaskShape",
    "Workload",
    "bounded_top",
    "coarse",
    "learnt_shape",
]

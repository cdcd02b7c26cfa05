"""A pod's whole request, compiled once for the thousands of node checks that follow.

A :class:`~xpushare.models.ContainerRequest` is the validated, user-facing form of what one
container asks of one vendor. The fit loop runs per node and per device, so each request is
compiled here into a :class:`Demand` of plain attributes (model names upper-cased, UUIDs in
sets) and the pod's demands into a :class:`PodRequest` with a hashable ``key``: two pods with
the same key behave the same on every node, which lets the placement engine remember answers
per node state instead of recomputing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from xpushare.models import ContainerRequest, PodRef
    from xpushare.scheduling.podchoice import PodPolicy

#: The compute capacity of a device without over-commit, in percent. HAMi makes a request of
#: all the cores exclusive only on such a device (its ``Totalcore == 100``, hami-protocol.md
#: §5.1 check 13): with ``deviceCoreScaling`` 2 a 100 % request is half the device's cores.
WHOLE_DEVICE_COMPUTE = 100


class Demand:
    """One container's request for one vendor, in the form the fit loop reads."""

    __slots__ = (
        "compute",
        "container",
        "count",
        "exclude_models",
        "exclude_uuids",
        "exclusive",
        "idle",
        "include_models",
        "include_uuids",
        "init",
        "key",
        "memory_mib",
        "memory_percent",
        "mode",
        "numa_bind",
        "partition",
        "request",
        "vendor",
    )

    def __init__(
        self, request: ContainerRequest, *, init: bool = False, idle: bool = False
    ) -> None:
        self.request = request
        self.vendor = request.vendor
        self.container = request.container
        self.init = init
        self.count = request.count
        self.memory_mib = request.memory_mib
        self.memory_percent = request.memory_percent
        self.exclusive = request.exclusive
        self.compute = request.effective_compute
        self.include_models = tuple(m.upper() for m in request.models_include)
        self.exclude_models = tuple(m.upper() for m in request.models_exclude)
        self.include_uuids = frozenset(request.uuids_include)
        self.exclude_uuids = frozenset(request.uuids_exclude)
        self.numa_bind = request.numa_bind
        self.partition = request.partition
        self.mode = request.mode
        #: Only devices no other container uses (HAMi's ``mutex`` GPU policy); the demand
        #: still books what it asks, unlike ``exclusive``.
        self.idle = idle
        self.key: tuple[Any, ...] = (
            self.vendor,
            init,
            self.count,
            self.memory_mib,
            self.memory_percent,
            self.compute,
            self.exclusive,
            self.include_models,
            self.exclude_models,
            tuple(sorted(self.include_uuids)),
            tuple(sorted(self.exclude_uuids)),
            self.numa_bind,
            self.partition,
            self.mode,
            idle,
        )

    def memory_for(self, physical_mib: int) -> int:
        """MiB this demand books on a device with *physical_mib* of memory.

        A percent is of the physical memory, never of the over-committed size: asking 50 %
        never gives a container more than half of what the device has (HAMi resolves it
        against the scaled size, hami-protocol.md §10 item 7).
        """
        if self.memory_mib is not None:
            return self.memory_mib
        if self.memory_percent is not None:
            return physical_mib * self.memory_percent // 100
        return physical_mib

    def exclusive_on(self, compute_cap: int) -> bool:
        """Whether the demand takes a device of *compute_cap* percent whole: only where the
        device is not over-committed (HAMi's rule), elsewhere it books its compute beside
        others like any share."""
        return self.exclusive and compute_cap == WHOLE_DEVICE_COMPUTE

    def model_allowed(self, model_key: str) -> bool:
        if self.include_models and not any(m in model_key for m in self.include_models):
            return False
        return not any(m in model_key for m in self.exclude_models)

    def __repr__(self) -> str:
        return f"Demand({self.request!r}, init={self.init})"


@dataclass(frozen=True, slots=True)
class PodRequest:
    """Everything one pod asks for: device demands per container and vendor, CPU, memory.

    ``cpu_milli`` and ``memory_mib`` are the pod's effective requests as kube-scheduler
    computes them (the larger of the sum over app containers and the largest init
    container); 0 means "not asked".
    """

    demands: tuple[Demand, ...] = ()
    cpu_milli: int = 0
    memory_mib: int = 0
    pod: PodRef | None = None
    key: tuple[Any, ...] = field(default=(), compare=False)
    #: The vendors asked for (set once: read for every node).
    vendors: frozenset[str] = field(default=frozenset(), compare=False)
    #: The pod's own policy choice (its HAMi policy annotations); ``None``: the cluster's.
    policy: PodPolicy | None = field(default=None, compare=False)

    @classmethod
    def build(
        cls,
        requests: Iterable[ContainerRequest] = (),
        *,
        init: Iterable[ContainerRequest] = (),
        cpu_milli: int = 0,
        memory_mib: int = 0,
        pod: PodRef | None = None,
        policy: PodPolicy | None = None,
    ) -> PodRequest:
        idle = policy is not None and policy.mutex
        demands = tuple(Demand(r, init=True, idle=idle) for r in init) + tuple(
            Demand(r, idle=idle) for r in requests
        )
        key = (cpu_milli, memory_mib, tuple(d.key for d in demands))
        return cls(
            demands=demands,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            pod=pod,
            key=key,
            vendors=frozenset(d.vendor for d in demands),
            policy=policy,
        )

    @property
    def app(self) -> tuple[Demand, ...]:
        return tuple(d for d in self.demands if not d.init)

    @property
    def init(self) -> tuple[Demand, ...]:
        return tuple(d for d in self.demands if d.init)

    @property
    def wants_devices(self) -> bool:
        return bool(self.demands)

    def describe(self) -> str:
        """A short human summary, e.g. 'mock: 1 device x 46% memory, 46% compute; 6 CPU'."""
        parts = [describe_demand(d) for d in self.demands]
        if self.cpu_milli:
            parts.append(f"{self.cpu_milli / 1000:g} CPU")
        if self.memory_mib:
            parts.append(f"{self.memory_mib} MiB host memory")
        return "; ".join(parts) or "nothing"


def describe_demand(d: Demand) -> str:
    what = f"{d.count} device" + ("s" if d.count != 1 else "")
    if d.exclusive:
        extra = "exclusive"
    else:
        if d.memory_mib is not None:
            mem = f"{d.memory_mib} MiB"
        elif d.memory_percent is not None:
            mem = f"{d.memory_percent}% memory"
        else:
            mem = "all memory"
        extra = f"{mem}, {d.compute}% compute"
    if d.partition:
        extra = f"partition {d.partition}"
    who = f"{d.container}: " if d.container else ""
    init = " (init)" if d.init else ""
    return f"{who}{d.vendor} {what} x {extra}{init}"


def effective_host_request(app: Sequence[int], init: Sequence[int]) -> int:
    """kube-scheduler's effective pod request: max(sum of app containers, largest init)."""
    return max(sum(app), max(init, default=0))

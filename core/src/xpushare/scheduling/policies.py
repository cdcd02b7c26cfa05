"""The classic placement policies: binpack, spread and best-fit.

* ``binpack`` / ``spread`` follow HAMi's node and GPU policies (hami-protocol.md §3.5-3.6):
  the node score is how full the node's devices already are (the mean of the slot, compute
  and memory shares), highest first for binpack and lowest first for spread; inside a node
  the devices are tried fullest first (binpack) or emptiest first (spread). The device order
  is an option of each, so "spread nodes, pack devices" is ``spread`` with
  ``device="binpack"``.
* ``best-fit`` is the FGD paper's BestFit baseline (Weng et al., ATC'23): the node whose
  free CPU and free device capacity left after the placement is smallest, each normalised
  by the largest node of the fleet (their simulator's 128 cores and 8 GPUs) and weighted
  0.5 each; devices are tried tightest first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from xpushare.scheduling.policy import Policy
from xpushare.scheduling.state import UNITS, DeviceState, DeviceTable, NodeState
from xpushare.scheduling.units import table_demand_units

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xpushare.scheduling.request import Demand, PodRequest

DeviceMode = Literal["binpack", "spread"]

#: Normalisers of best-fit, from the FGD simulator's MaxSpecCpu (128,000 millicores) and
#: MaxSpecGpu (8,000 milli-GPU): the largest node of the openb fleet.
BEST_FIT_MAX_CPU_MILLI = 128_000
BEST_FIT_MAX_DEVICES = 8


def fullest_first(table: DeviceTable) -> list[DeviceState]:
    return sorted(table.devices, key=lambda d: (d.free_units(), d.index))


def emptiest_first(table: DeviceTable) -> list[DeviceState]:
    return sorted(table.devices, key=lambda d: (-d.free_units(), d.index))


def usage_share(node: NodeState, request: PodRequest) -> float:
    """How full the node is where the pod would go: its demanded vendors' devices, or CPU."""
    shares = [
        table.usage_share()
        for vendor in request.vendors
        if (table := node.tables.get(vendor)) is not None
    ]
    if shares:
        return sum(shares) / len(shares)
    if node.cpu_alloc:
        return min(1.0, node.cpu_used / node.cpu_alloc)
    return 0.0


class _Ordered(Policy):
    def __init__(self, device: DeviceMode) -> None:
        if device not in ("binpack", "spread"):
            raise ValueError(f"device order must be 'binpack' or 'spread', got {device!r}")
        self.device = device

    def device_order(
        self, node: NodeState, table: DeviceTable, demand: Demand
    ) -> Sequence[DeviceState] | None:
        return fullest_first(table) if self.device == "binpack" else emptiest_first(table)


class BinpackPolicy(_Ordered):
    name = "binpack"
    state_pure = True
    description = "fullest node first (HAMi's default node policy)"

    def __init__(self, device: DeviceMode = "binpack") -> None:
        super().__init__(device)

    def score(self, node: NodeState, request: PodRequest) -> float:
        return usage_share(node, request)


class SpreadPolicy(_Ordered):
    name = "spread"
    state_pure = True
    description = "emptiest node first"

    def __init__(self, device: DeviceMode = "spread") -> None:
        super().__init__(device)

    def score(self, node: NodeState, request: PodRequest) -> float:
        return 1.0 - usage_share(node, request)


class BestFitPolicy(Policy):
    name = "best-fit"
    state_pure = True
    description = "least CPU and device capacity left over (FGD paper's BestFit)"

    def __init__(
        self,
        max_cpu_milli: int = BEST_FIT_MAX_CPU_MILLI,
        max_devices: int = BEST_FIT_MAX_DEVICES,
        cpu_weight: float = 0.5,
    ) -> None:
        if max_cpu_milli <= 0 or max_devices <= 0 or not 0 <= cpu_weight <= 1:
            raise ValueError("best-fit needs max_cpu_milli > 0, max_devices > 0, 0<=cpu_weight<=1")
        self.max_cpu = max_cpu_milli
        self.max_units = max_devices * UNITS
        self.cpu_weight = cpu_weight

    def score(self, node: NodeState, request: PodRequest) -> float:
        return self._score(node, request, {})

    def score_many(
        self, nodes: Sequence[NodeState], request: PodRequest
    ) -> list[float | tuple[float, ...] | None]:
        return list(self.score_each(nodes, request))

    def score_each(self, nodes: Sequence[NodeState], request: PodRequest) -> list[float]:
        """:meth:`score` of each node, the demand's units computed once per table size."""
        units: dict[tuple[str, int, int, int, int], int] = {}
        return [self._score(node, request, units) for node in nodes]

    def _score(
        self, node: NodeState, request: PodRequest, units: dict[tuple[str, int, int, int, int], int]
    ) -> float:
        left = 0.0
        tables = node.tables
        for vendor in request.vendors or tables:
            table = tables.get(vendor)
            if table is None:
                continue
            size = (vendor, len(table.devices), *table.sizes)
            used = units.get(size)
            if used is None:
                used = units[size] = sum(
                    table_demand_units(table, d) for d in request.demands if d.vendor == vendor
                )
            left += (table.units_free - used) / self.max_units
        if node.cpu_alloc is not None:
            cpu_left = (node.cpu_alloc - node.cpu_used - request.cpu_milli) / self.max_cpu
            left = self.cpu_weight * cpu_left + (1 - self.cpu_weight) * left
        return -left

    def device_order(
        self, node: NodeState, table: DeviceTable, demand: Demand
    ) -> Sequence[DeviceState] | None:
        return fullest_first(table)

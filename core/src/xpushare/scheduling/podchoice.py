"""What a pod chose about its own placement (HAMi's per-pod policy annotations), as the
engine carries it on a request: podpolicy.py parses and applies it.

Its own module because a request (request.py) holds one, and podpolicy.py's device orders
take a request's demand: neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: HAMi's GPU policy tokens; the first three are sort keys, the last two change the fit.
BINPACK, SPREAD, NUMA, TOPOLOGY, MUTEX = "binpack", "spread", "numa", "topology-aware", "mutex"
GPU_TOKENS: Final = (BINPACK, SPREAD, NUMA, TOPOLOGY, MUTEX)


@dataclass(frozen=True, slots=True)
class PodPolicy:
    """What a pod's annotations change about its placement (``None``: the cluster's)."""

    #: A policy name for the node choice.
    node: str | None = None
    #: HAMi's GPU policy value, normalised: ``None`` when the pod gives none.
    device: str | None = None
    #: The device-score weights (slot, core, memory).
    weights: tuple[int, int, int] | None = None

    @property
    def mutex(self) -> bool:
        return self.device is not None and MUTEX in self.device.split(",")

    @property
    def topology(self) -> bool:
        return self.device is not None and TOPOLOGY in self.device.split(",")


__all__ = ["BINPACK", "GPU_TOKENS", "MUTEX", "NUMA", "SPREAD", "TOPOLOGY", "PodPolicy"]

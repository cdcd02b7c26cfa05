"""The answer to "does this request fit on this node", with the reasons when it does not."""

from enum import StrEnum
from typing import Any

from pydantic import Field

from xpushare.models._base import Model
from xpushare.models.assignment import DeviceSlice


class FitReason(StrEnum):
    """Why a device (or a node) was not used; the value is the sentence a user reads."""

    UNHEALTHY = "device unhealthy"
    CORDONED = "device cordoned (hami.io/device-cordon on the node)"
    MODEL_MISMATCH = "device model not allowed by the request"
    UUID_MISMATCH = "device UUID not allowed by the request"
    SLOTS_EXHAUSTED = "no free share slot on the device"
    EXCLUSIVE_CONFLICT = "device already used, request wants it exclusively"
    HELD_EXCLUSIVELY = "device held exclusively by another pod"
    INSUFFICIENT_MEMORY = "not enough free device memory"
    INSUFFICIENT_COMPUTE = "not enough free device compute"
    COMPUTE_EXHAUSTED = "device compute fully booked"
    PARTITION_UNAVAILABLE = "no free partition of the requested profile"
    MODE_MISMATCH = "device not in a sharing mode the request accepts"
    NUMA_MISMATCH = "devices not on one NUMA node"
    TOO_FEW_DEVICES = "fewer devices on the node than requested"
    NOT_ENOUGH_FIT = "too few devices left that fit the request"
    NO_DEVICES = "node has no devices of this vendor"
    INSUFFICIENT_CPU = "not enough free CPU on the node"
    INSUFFICIENT_HOST_MEMORY = "not enough free memory on the node"
    VENDOR_ERROR = "the vendor plugin failed"


class FitResult(Model):
    """One container request against one node.

    ``reasons`` counts, per reason, the devices (or the node, for node-wide reasons) that
    were turned down; it is filled whether or not the request fits, so ``xpushare fit`` can
    show why some devices were skipped.
    """

    fits: bool
    devices: tuple[DeviceSlice, ...] = ()
    reasons: dict[FitReason, int] = Field(default_factory=dict)
    message: str = ""

    def explain(self) -> str:
        """One line a user can act on, e.g. '3/8 not enough free device memory, ...'."""
        if self.message:
            return self.message
        parts = [f"{n} {reason.value}" for reason, n in sorted(self.reasons.items())]
        return ", ".join(parts) if parts else ("fits" if self.fits else "does not fit")


class NodeFit(Model):
    """A whole pod (every container, every vendor) against one node."""

    node: str
    fits: bool
    containers: tuple[FitResult, ...] = ()
    score: float = 0.0
    reason: str = ""


def node_fit_json(fit: NodeFit, pod: str, policy: str) -> dict[str, Any]:
    """The explanation ``xpushare fit --json`` prints, and the web view shows, for one node."""
    return {
        "pod": pod,
        "node": fit.node,
        "policy": policy,
        "fits": fit.fits,
        "reason": fit.reason,
        "score": fit.score + 0.0,
        "containers": [
            {
                "fits": r.fits,
                "devices": [s.model_dump(exclude_none=True) for s in r.devices],
                "reasons": {reason.value: n for reason, n in r.reasons.items()},
                "message": r.message,
            }
            for r in fit.containers
        ],
    }

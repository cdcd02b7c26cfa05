"""How placement decisions are made: the policy, its options, over-commit, tie-breaks.

One model for the scheduler's configuration file, the simulator's flags and ``xpushare
fit``, so the three decide alike.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from xpushare.models.request import MAX_DEVICE_MEMORY_MIB
from xpushare.scheduling import DEFAULT_POLICY, UsageLedger
from xpushare.scheduling.state import MAX_MEMO_ENTRIES


class RequestDefaults(BaseModel):
    """What a container that leaves out memory or compute gets: HAMi's device settings.

    ``memory_factor`` is HAMi's ``memoryFactor``: the memory resource counts units of this
    many MiB (``nvidia.com/gpumem: 8`` with 1024 is 8 GiB). Unset: the vendor's own unit.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    default_memory_mib: int = Field(
        default=0,
        ge=0,
        le=MAX_DEVICE_MEMORY_MIB,
        description="MiB per device when neither memory nor a percent is given "
        "(HAMi's defaultMemory); 0: the whole device",
    )
    default_compute_percent: int = Field(
        default=0, ge=0, le=100, description="compute percent when none is given (defaultCores)"
    )
    memory_factor: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DEVICE_MEMORY_MIB,
        description="MiB per unit of the memory resource (HAMi's memoryFactor)",
    )


class PlacementConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: str = Field(default=DEFAULT_POLICY, description="placement policy by name")
    policy_options: dict[str, Any] = Field(
        default_factory=dict, description="keyword options of the policy"
    )
    device_policy: Literal["binpack", "spread", "topology-aware"] | None = Field(
        default=None,
        description="device order inside a node; unset: the policy's own. topology-aware "
        "(HAMi's) orders as spread and lets a vendor that knows its devices' links choose "
        "by them",
    )
    memory_overcommit: dict[str, float] = Field(
        default_factory=dict,
        description="per vendor ('*' for all): device memory may be booked up to this factor",
    )
    compute_overcommit: dict[str, float] = Field(
        default_factory=dict,
        description="per vendor ('*' for all): device compute may be booked up to this factor",
    )
    vendor_score_weight: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="weight of the vendors' own xpushare_score against the policy's score",
    )
    tie_break: Literal["first", "random"] = Field(
        default="first",
        description="among equally good nodes: the first listed, or one at random (seeded)",
    )
    seed: int = Field(default=0, description="seed of the random tie-break")
    request_defaults: dict[str, RequestDefaults] = Field(
        default_factory=dict,
        description="per vendor ('*' for all): HAMi's defaultMemory, defaultCores and memoryFactor",
    )

    @field_validator("memory_overcommit", "compute_overcommit")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        for vendor, factor in value.items():
            if not factor > 0:
                raise ValueError(f"over-commit of {vendor!r} must be > 0, got {factor}")
        return value

    def new_ledger(self, *, memo_limit: int = MAX_MEMO_ENTRIES) -> UsageLedger:
        """An empty usage ledger with this configuration's over-commit factors."""
        return UsageLedger(
            memory_overcommit=self.memory_overcommit,
            compute_overcommit=self.compute_overcommit,
            memo_limit=memo_limit,
        )

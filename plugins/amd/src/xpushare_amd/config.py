"""The AMD vendor's names, defaults and configuration model.

Why a model: the same settings are read in two processes that share only the vendor spec.
The scheduler side sees them as ``VendorSpec.config`` (from the file named by
``XPUSHARE_AMD_CONFIG``, read by ``xpushare_vendor``); the node side sees them merged with
the node agent's ``amd`` section as ``ctx.config``. Both validate :class:`AmdConfig`, so a
misspelled key is an error that names it instead of a silently ignored setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from xpushare.models import ResourceNames
from xpushare.vendorconfig import load_settings, validate

VENDOR: Final = "amd"

#: HAMi's AMD resource names (research/hami-protocol.md §8.1), so a HAMi user's pod specs work
#: unchanged: ``amd.com/gpu`` devices, ``amd.com/gpumem`` MiB per device, ``amd.com/gpucores``
#: percent of each device's compute. ``amd.com/gpumem-percentage`` is ours, named like
#: NVIDIA's HAMi key; HAMi's AMD backend has no percent form.
DEFAULT_RESOURCES: Final = ResourceNames(
    count="amd.com/gpu",
    memory="amd.com/gpumem",
    memory_percent="amd.com/gpumem-percentage",
    compute="amd.com/gpucores",
)

#: HAMi's AMD backend takes a container that omits ``amd.com/gpucores`` as asking for 100 %
#: of each device's compute units (hami-protocol.md §8.2), unlike NVIDIA's 0.
DEFAULT_COMPUTE_PERCENT: Final = 100

#: Containers that may share one device; HAMi's ``deviceSplitCount`` default.
DEFAULT_SHARE_SLOTS: Final = 10

#: Names a YAML or JSON file holding :class:`AmdConfig`, read in every process.
CONFIG_ENV: Final = "XPUSHARE_AMD_CONFIG"
#: Overrides ``library_path`` (handy for ``xpushare detect`` by hand).
LIBRARY_ENV: Final = "XPUSHARE_AMD_LIBRARY"

#: The library's file name, as ROCm installs it and as the ``amdsmi`` wrapper loads it.
LIBRARY_NAME: Final = "libamd_smi.so"

#: ROCm's default install root, and the environment variables that name another one (the
#: wrapper and GPUStack read the same, research/gpustack-devices.md §1.3, python-ecosystem.md
#: §3.2). ``AMD_SMI_LIB_PATH`` names the library's directory directly.
DEFAULT_ROCM_ROOT: Final = "/opt/rocm"
ROCM_ENV: Final = ("ROCM_HOME", "ROCM_PATH")
LIBRARY_DIR_ENV: Final = "AMD_SMI_LIB_PATH"

BYTES_PER_MIB: Final = 1024 * 1024


class AmdConfig(BaseModel):
    """Settings of the AMD vendor; every field has a default that works on a stock node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    library_path: str | None = Field(
        default=None, description="libamd_smi.so, or the directory holding it; tried first"
    )
    rocm_roots: tuple[str, ...] = Field(
        default=(), description="more ROCm roots to search (<root>/lib), e.g. /host/opt/rocm"
    )
    share_slots: int = Field(default=DEFAULT_SHARE_SLOTS, ge=1)
    resource_names: ResourceNames = DEFAULT_RESOURCES
    default_compute_percent: int = Field(
        default=DEFAULT_COMPUTE_PERCENT,
        ge=0,
        le=100,
        description="compute asked by a container that gives no compute resource",
    )


def load_file(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings of the file named by ``XPUSHARE_AMD_CONFIG`` ({} when unset).

    :raises ValueError: the file cannot be read or is not a mapping; the message names it.
    """
    return load_settings("AMD", CONFIG_ENV, LIBRARY_ENV, environ)


def parse(settings: Mapping[str, Any]) -> AmdConfig:
    """Validate *settings*; ``ValueError`` names the field and what is wrong with it."""
    if isinstance(settings.get("rocm_roots"), str):
        roots = str(settings["rocm_roots"]).split(",")
        settings = {**settings, "rocm_roots": tuple(r.strip() for r in roots if r.strip())}
    return validate(AmdConfig, settings, lambda exc: f"invalid AMD vendor config: {exc}")

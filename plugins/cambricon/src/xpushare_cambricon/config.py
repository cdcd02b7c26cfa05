"""The Cambricon vendor's configuration: where CNDev lives, resource names, how MLUs are shared.

Why a model of its own: the scheduler side (request parsing, fit) reads these settings from
``VendorSpec.config``, and the node side (library loading, Allocate) from ``ctx.config``,
which the node agent's ``cambricon`` section extends; both validate this one model.

Resource names and the memory unit default to HAMi's (hami-protocol.md §8.1 and §9.2, the
values HAMi's chart renders), so a HAMi user's MLU pod specs keep their meaning.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from xpushare.models import ResourceNames
from xpushare.vendorconfig import SettingsCache, load_settings, validate

VENDOR: Final = "cambricon"

#: Names a YAML or JSON file holding this model, read by ``xpushare_vendor`` in every process.
CONFIG_ENV: Final = "XPUSHARE_CAMBRICON_CONFIG"
#: Overrides ``library_path``.
LIBRARY_ENV: Final = "XPUSHARE_CAMBRICON_LIBRARY"
#: Cambricon's install root variable, honoured by GPUStack's CNDev loader too
#: (gpustack-devices.md §1.3); its default is /usr/local/neuware.
NEUWARE_HOME_ENV: Final = "NEUWARE_HOME"
DEFAULT_NEUWARE_HOME: Final = "/usr/local/neuware"

#: HAMi's vmemory unit: ``cambricon.com/mlu.smlu.vmemory`` counts 256 MiB blocks
#: (hami-protocol.md §8.1).
HAMI_MEMORY_UNIT_MIB: Final = 256
#: GPUStack's ceiling of logical slices per Cambricon card (gpustack-devices.md §2.6).
DEFAULT_SHARE_SLOTS: Final = 16

#: HAMi chart's Cambricon resource names (hami-protocol.md §9.2).
HAMI_NAMES: Final = ResourceNames(
    count="cambricon.com/vmlu",
    memory="cambricon.com/mlu.smlu.vmemory",
    compute="cambricon.com/mlu.smlu.vcore",
)

ShareMode = Literal["smlu", "env", "none"]


class CambriconConfig(BaseModel):
    """Settings of the Cambricon vendor; every field has a default that works on a stock node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resource_names: ResourceNames = HAMI_NAMES
    memory_unit_mib: int = Field(
        default=HAMI_MEMORY_UNIT_MIB, ge=1, description="MiB per unit of the memory resource"
    )
    share_mode: ShareMode = Field(
        default="smlu",
        description="how a share of a card is made: 'smlu' creates a CNDev sMLU instance "
        "per container (hard memory and compute quotas, MLU370 and later); 'env' hands the "
        "card with HAMi's CAMBRICON_SPLIT_* variables for the Cambricon split runtime; "
        "'none' serves whole cards only",
    )
    share_slots: int = Field(default=DEFAULT_SHARE_SLOTS, ge=1, description="shares per card")
    library_path: str | None = Field(default=None, description="libcndev.so to load first")
    neuware_home: str = Field(
        default_factory=lambda: os.environ.get(NEUWARE_HOME_ENV) or DEFAULT_NEUWARE_HOME,
        description="the host's Cambricon install root (NEUWARE_HOME)",
    )
    host_root: str = Field(
        default="",
        description="where the host's filesystem is mounted in the node agent's container "
        "('' = the agent sees the host's paths as they are)",
    )
    sysfs_root: str = Field(default="/sys", description="for PCI NUMA affinity")
    visible_devices_env: str = "CAMBRICON_VISIBLE_DEVICES"
    cnmon_path: str = Field(
        default="", description="host path of cnmon to mount read-only into containers"
    )
    split_runtime_path: str = Field(
        default="",
        description="host path of HAMi's smlu-containerd, mounted at /usr/bin/smlu-containerd "
        "in 'env' mode",
    )

    def on_host(self, path: str) -> Path:
        """Where a host path is seen from inside the node agent's container."""
        if not self.host_root:
            return Path(path)
        return Path(self.host_root) / path.lstrip("/")


def load_file(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings of the file named by ``XPUSHARE_CAMBRICON_CONFIG`` ({} when unset).

    :raises ValueError: the file cannot be read or is not a mapping; the message names it.
    """
    return load_settings("Cambricon", CONFIG_ENV, LIBRARY_ENV, environ)


def parse(settings: Mapping[str, Any]) -> CambriconConfig:
    """Validate *settings*; ``ValueError`` names the field and what is wrong with it."""
    return validate(
        CambriconConfig, settings, lambda exc: f"invalid Cambricon vendor config: {exc}"
    )


_CACHE: Final[SettingsCache[CambriconConfig]] = SettingsCache()


def cached(settings: Mapping[str, Any]) -> CambriconConfig:
    """:func:`parse`, remembered per settings object (the vendor spec's config)."""
    return _CACHE.get(settings, parse)

"""The Ascend vendor's configuration: where DCMI lives, which chip family is served, templates.

Why a model of its own: the same settings are read in two processes that share nothing but
the vendor spec. The scheduler side (request parsing, fit, admission) sees them as
``VendorSpec.config``; the node side (library loading, Allocate) sees them merged with the
node agent's ``ascend`` section as ``ctx.config``. Both validate the same pydantic model, so a
typo in either place is an error that names the field.

The chip table defaults to HAMi's ``vnpus`` device config (hami-protocol.md §9.2, the values
HAMi's chart renders), so a cluster moving from HAMi serves the same resource names and cuts
NPUs along the same vNPU templates.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

from xpushare.models import ResourceNames
from xpushare.vendorconfig import SettingsCache, load_settings, validate

VENDOR: Final = "ascend"

#: Names a YAML or JSON file holding this model; read by ``xpushare_vendor`` in every process,
#: so the scheduler and the node agent agree on resource names and templates.
CONFIG_ENV: Final = "XPUSHARE_ASCEND_CONFIG"
#: Overrides ``library_path`` (handy for ``xpushare detect`` by hand).
LIBRARY_ENV: Final = "XPUSHARE_ASCEND_LIBRARY"
#: CANN's own variable for its install root, which GPUStack's DCMI loader honours too
#: (gpustack-devices.md §1.3); its default is /usr/local/Ascend.
CANN_HOME_ENV: Final = "CANN_HOME"
DEFAULT_ASCEND_HOME: Final = "/usr/local/Ascend"

#: HAMi's resource-name domain for Ascend (hami-protocol.md §8.1: huawei.com/<commonWord>).
RESOURCE_DOMAIN: Final = "huawei.com"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Template(_Strict):
    """One vNPU template a chip can be cut into (``npu-smi info -t template-info``)."""

    name: str = Field(min_length=1, description="the driver's template name, e.g. vir05_1c_16g")
    memory_mib: int = Field(alias="memory", gt=0)
    ai_core: int = Field(alias="aiCore", gt=0)
    ai_cpu: int = Field(default=0, alias="aiCPU", ge=0)


class ChipSpec(_Strict):
    """One Ascend chip family as HAMi's ``vnpus.configs`` entry describes it."""

    chip_name: str = Field(alias="chipName", description="DCMI's chip_name, e.g. 910B3")
    common_word: str = Field(alias="commonWord", description="HAMi's name, e.g. Ascend910B3")
    memory_capacity_mib: int = Field(alias="memoryCapacity", gt=0)
    memory_allocatable_mib: int = Field(alias="memoryAllocatable", gt=0)
    ai_core: int = Field(alias="aiCore", gt=0)
    ai_cpu: int = Field(default=0, alias="aiCPU", ge=0)
    super_pod: bool = Field(
        default=False,
        alias="superPod",
        description="two dies per module (910C): whole-module requests come in pairs",
    )
    templates: tuple[Template, ...] = ()

    def template(self, name: str) -> Template | None:
        return next((t for t in self.templates if t.name == name), None)


def _chip(
    chip: str,
    word: str,
    capacity: int,
    allocatable: int,
    ai_core: int,
    ai_cpu: int,
    templates: tuple[tuple[str, int, int, int], ...],
    *,
    super_pod: bool = False,
) -> ChipSpec:
    return ChipSpec(
        chip_name=chip,
        common_word=word,
        memory_capacity_mib=capacity,
        memory_allocatable_mib=allocatable,
        ai_core=ai_core,
        ai_cpu=ai_cpu,
        super_pod=super_pod,
        templates=tuple(
            Template(name=n, memory_mib=m, ai_core=c, ai_cpu=p) for n, m, c, p in templates
        ),
    )


#: HAMi's chart defaults (hami-protocol.md §9.2; the chart's device-configmap ``vnpus`` list):
#: chip name as DCMI reports it, HAMi's common word, memory capacity and allocatable MiB, AI
#: cores, AI CPUs, and templates (name, MiB, AI cores, AI CPUs). The original Ascend 910
#: reports chip name "910B" and is HAMi's "Ascend910A"; the 910C (A3) reports "Ascend910".
DEFAULT_CHIPS: Final[tuple[ChipSpec, ...]] = (
    _chip(
        "910B",
        "Ascend910A",
        32768,
        32768,
        30,
        0,
        (
            ("vir02", 2184, 2, 0),
            ("vir04", 4369, 4, 0),
            ("vir08", 8738, 8, 0),
            ("vir16", 17476, 16, 0),
        ),
    ),
    _chip(
        "910B2",
        "Ascend910B2",
        65536,
        65536,
        24,
        6,
        (
            ("vir03_1c_8g", 8192, 3, 1),
            ("vir06_1c_16g", 16384, 6, 1),
            ("vir12_3c_32g", 32768, 12, 3),
        ),
    ),
    _chip(
        "910B3",
        "Ascend910B3",
        65536,
        65536,
        20,
        7,
        (("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)),
    ),
    _chip(
        "910B4-1",
        "Ascend910B4-1",
        65536,
        65536,
        20,
        7,
        (("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)),
    ),
    _chip(
        "910B4",
        "Ascend910B4",
        32768,
        32768,
        20,
        7,
        (("vir05_1c_8g", 8192, 5, 1), ("vir10_3c_16g", 16384, 10, 3)),
    ),
    _chip(
        "310P3",
        "Ascend310P",
        24576,
        21527,
        8,
        7,
        (("vir01", 3072, 1, 1), ("vir02", 6144, 2, 2), ("vir04", 12288, 4, 4)),
    ),
    _chip(
        "Ascend910",
        "Ascend910C",
        65536,
        65536,
        20,
        7,
        (("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)),
        super_pod=True,
    ),
)

#: The device nodes every CANN container needs besides its ``/dev/davinci<N>``: the device
#: manager, the shared-virtual-memory node and the host-device channel (what Ascend Docker
#: Runtime mounts; gpustack-devices.md §4.5 and the Ascend container docs).
DEFAULT_CONTROL_DEVICES: Final = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")

#: Host paths a CANN container reads from the host driver install, mounted read-only when
#: they exist on the host: the driver (libraries, version.info), add-ons of older drivers,
#: DCMI, npu-smi and the install record.
DEFAULT_DRIVER_MOUNTS: Final = (
    "/usr/local/Ascend/driver",
    "/usr/local/Ascend/add-ons",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/etc/ascend_install.info",
)


class AscendConfig(_Strict):
    """Settings of the Ascend vendor; every field has a default that works on a stock node."""

    chip: str = Field(
        default="910B3",
        description="the chip family (DCMI chip_name) whose HAMi resource names this "
        "deployment serves; one family per deployment",
    )
    chips: tuple[ChipSpec, ...] = DEFAULT_CHIPS
    resource_names: ResourceNames | None = Field(
        default=None, description="override HAMi's huawei.com/<commonWord> names"
    )
    memory_factor: int = Field(
        default=1, ge=1, description="MiB per unit of the memory resource (HAMi memoryFactor)"
    )
    library_path: str | None = Field(default=None, description="libdcmi.so to load first")
    ascend_home: str = Field(
        default_factory=lambda: os.environ.get(CANN_HOME_ENV) or DEFAULT_ASCEND_HOME,
        description="the host's Ascend install root (CANN_HOME)",
    )
    host_root: str = Field(
        default="",
        description="where the host's filesystem is mounted in the node agent's container "
        "('' = the agent sees the host's paths as they are)",
    )
    sysfs_root: str = Field(default="/sys", description="for PCI NUMA affinity")
    visible_devices_env: str = "ASCEND_VISIBLE_DEVICES"
    vnpu_specs_env: str = "ASCEND_VNPU_SPECS"
    control_devices: tuple[str, ...] = DEFAULT_CONTROL_DEVICES
    driver_mounts: tuple[str, ...] = DEFAULT_DRIVER_MOUNTS
    vnpu: bool = Field(
        default=True,
        description="whether nodes run Ascend Docker Runtime, which cuts vNPUs from "
        "ASCEND_VNPU_SPECS; without it, memory requests are refused at admission",
    )
    runtime_class_name: str = Field(
        default="",
        description="set as the pod's runtimeClassName by the webhook when not empty "
        "(HAMi's runtimeClassName; e.g. 'ascend' for Ascend Docker Runtime)",
    )

    @model_validator(mode="after")
    def _chip_is_known(self) -> AscendConfig:
        if self.family is None:
            known = ", ".join(c.chip_name for c in self.chips)
            raise ValueError(f"chip {self.chip!r} is not in the chips table; known: {known}")
        return self

    @property
    def family(self) -> ChipSpec | None:
        """The chip family this deployment serves."""
        return self.chip_spec(self.chip)

    @property
    def served(self) -> ChipSpec:
        family = self.family
        assert family is not None  # checked by the validator
        return family

    def chip_spec(self, chip_name: str) -> ChipSpec | None:
        return next((c for c in self.chips if c.chip_name == chip_name), None)

    def names(self) -> ResourceNames:
        """The resource names served: the override, else HAMi's for the served family."""
        if self.resource_names is not None:
            return self.resource_names
        word = self.served.common_word
        return ResourceNames(
            count=f"{RESOURCE_DOMAIN}/{word}",
            memory=f"{RESOURCE_DOMAIN}/{word}-memory",
            compute=f"{RESOURCE_DOMAIN}/{word}-core",
        )

    def on_host(self, path: str) -> Path:
        """Where a host path is seen from inside the node agent's container."""
        if not self.host_root:
            return Path(path)
        return Path(self.host_root) / path.lstrip("/")


def load_file(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings of the file named by ``XPUSHARE_ASCEND_CONFIG`` ({} when unset).

    :raises ValueError: the file cannot be read or is not a mapping; the message names it.
    """
    return load_settings("Ascend", CONFIG_ENV, LIBRARY_ENV, environ)


def parse(settings: Mapping[str, Any]) -> AscendConfig:
    """Validate *settings*; ``ValueError`` names the field and what is wrong with it."""
    return validate(AscendConfig, settings, lambda exc: f"invalid Ascend vendor config: {exc}")


_CACHE: Final[SettingsCache[AscendConfig]] = SettingsCache()


def cached(settings: Mapping[str, Any]) -> AscendConfig:
    """:func:`parse`, remembered per settings object (the vendor spec's config)."""
    return _CACHE.get(settings, parse)

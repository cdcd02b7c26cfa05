"""The Enflame vendors' settings (``XPUSHARE_ENFLAME_CONFIG`` and the agent's sections).

HAMi has two Enflame backends (hami-protocol.md §8.1): whole GCUs as ``enflame.com/gcu``
(HAMi's ``GCU``) and DRS partitions as ``enflame.com/drs-gcu`` (a profile's slice count) or
``enflame.com/gcu-memory`` + ``enflame.com/gcu-core`` (turned into a profile), HAMi's
``Enflame``. xpushare has one entry point for each, ``enflame`` and ``enflame-drs``, named as
the core's HAMi key table names them, so the pods HAMi placed are counted against the same
GCUs. Both read the one Enflame settings file; its ``mode`` says which of the two a node
serves, and the other stays inactive there, so a GCU is never offered under two resources.
"""

from __future__ import annotations

from typing import Final, Literal, Self

from pydantic import Field, field_validator, model_validator

from xpushare.models import ResourceNames
from xpushare_others.common.settings import TwoModeVendorConfig
from xpushare_others.enflame.drs import parse_profile_name

#: The vendor names (entry points); the settings file is named after the first.
VENDOR: Final = "enflame"
DRS_VENDOR: Final = "enflame-drs"

GCU_NAMES: Final = ResourceNames(count="enflame.com/gcu")
DRS_NAMES: Final = ResourceNames(
    count="enflame.com/drs-gcu", memory="enflame.com/gcu-memory", compute="enflame.com/gcu-core"
)

#: DRS profiles when the settings name none: HAMi's own test vectors of an S60 node
#: (``pkg/device/enflame/device_test.go``: ``1g.6gb``, ``3g.20gb``, ``6g.40gb`` with ids 0-2 on
#: a GCU of 6 slices). Set ``drs_profiles`` to what Enflame's tools list for your GCUs.
DEFAULT_DRS_PROFILES: Final = {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}
#: Most profiles one node may declare: Enflame's cards offer a handful.
MAX_PROFILES: Final = 32


class EnflameConfig(TwoModeVendorConfig):
    #: ``gcu``: whole GCUs (vendor ``enflame``); ``drs``: DRS partitions (``enflame-drs``).
    mode: Literal["gcu", "drs"] = "gcu"
    #: EFML's install directories (Enflame's driver package), relative to ``/`` or each root.
    library_dirs: tuple[str, ...] = ("usr/lib", "usr/lib64", "usr/local/lib")
    #: Node-wide control node of the Enflame driver, passed when the host has it.
    control_nodes: tuple[str, ...] = ("/dev/gcuctl",)
    #: Variable Enflame's container toolkit reads for the GCUs it exposes (EFML indices).
    visible_env: str = "ENFLAME_VISIBLE_DEVICES"
    #: Device ids: ``node-index`` is HAMi's ``<node>-GCU-<i>`` (whole) or
    #: ``<node>-enflame-drs-<i>`` (DRS), what HAMi's pod annotations name, so a migration
    #: counts HAMi's pods; ``uuid`` is the GCU's UUID from EFML.
    id_format: Literal["node-index", "uuid"] = "node-index"
    #: DRS profile name (``<slices>g.<memory>gb``) to Enflame's profile id, for every GCU.
    drs_profiles: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_DRS_PROFILES))
    #: Slices one GCU has; by default the slices of its largest profile.
    drs_capacity: int | None = Field(default=None, ge=1, le=1024)
    #: Cut each DRS partition as an instance on the GCU at Allocate, with efsmi, as
    #: Enflame's device plugin does (:mod:`.instances`); ``false`` only books and announces it.
    drs_cut: bool = True
    #: Enflame's efsmi: a path, or a name looked up in the node agent's ``PATH``.
    efsmi_path: str = Field(default="efsmi", min_length=1, max_length=4096)
    #: Seconds one efsmi run may take (creating an instance takes a few).
    efsmi_timeout_s: float = Field(default=60.0, gt=0, le=600)
    #: Where the node agent keeps which DRS instance each container got, so an instance is
    #: destroyed after an agent restart too: under kubelet's device-plugin directory, which
    #: the agent mounts from the host.
    drs_state_dir: str = "/var/lib/kubelet/device-plugins/xpushare-enflame-drs"

    @field_validator("drs_profiles")
    @classmethod
    def _profiles(cls, value: dict[str, str]) -> dict[str, str]:
        if not value or len(value) > MAX_PROFILES:
            raise ValueError(f"must name 1 to {MAX_PROFILES} DRS profiles")
        for name in value:
            if parse_profile_name(name) is None:
                raise ValueError(
                    f"profile {name[:40]!r} is not <slices>g.<memory>gb (e.g. 3g.20gb)"
                )
        return value

    @model_validator(mode="after")
    def _capacity(self) -> Self:
        largest = max(p[0] for p in map(parse_profile_name, self.drs_profiles) if p)
        if self.drs_capacity is not None and self.drs_capacity < largest:
            raise ValueError(
                f"drs_capacity {self.drs_capacity} is below the {largest} slices of the "
                "largest DRS profile"
            )
        return self

    def names(self, vendor: str) -> ResourceNames:
        if self.resource_names is not None:
            return self.resource_names
        return DRS_NAMES if vendor == DRS_VENDOR else GCU_NAMES


def mode_of(vendor: str) -> Literal["gcu", "drs"]:
    return "drs" if vendor == DRS_VENDOR else "gcu"

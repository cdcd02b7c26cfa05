"""The two Enflame vendor plugins, ``enflame`` (whole GCUs) and ``enflame-drs`` (DRS partitions).

Why one class for both: they drive the same library and hardware and differ only in their
resource names, request rules and which ``mode`` a node serves, so each entry point is an
instance (``xpushare_others.enflame.plugin:gcu`` and ``:drs``) whose hooks are thin calls into
the modules that do the work. The instance on a node whose ``mode`` is the other one is
inactive there, with that reason.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence

from xpushare import API_VERSION, VendorUnavailable, hookimpl
from xpushare.models import (
    AllocateRequest,
    ContainerAllocation,
    ContainerRequest,
    ContainerView,
    Device,
    DeviceUsage,
    FitResult,
    HealthEvent,
    JsonPatchOp,
    MonitorSnapshot,
    NodeView,
    PodAssignment,
    PodView,
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_others.common import settings
from xpushare_others.enflame import allocate, detect, health, library, monitor
from xpushare_others.enflame import fit as fitting
from xpushare_others.enflame import request as rules
from xpushare_others.enflame.config import DRS_VENDOR, VENDOR, EnflameConfig, mode_of
from xpushare_others.enflame.drs import parse_profile_name

#: HAMi's pod annotations for Enflame's DRS tooling (hami-protocol.md §8.1).
ASSIGNED = "enflame.com/gcu-assigned"
ASSIGNED_INDEX = "enflame.com/gcu-assigned-index"
ASSIGNED_ID = "enflame.com/gcu-assigned-id"
ASSIGNED_MINOR = "enflame.com/gcu-assigned-minor"
REQUEST_SIZE = "enflame.com/gcu-request-size"
ASSIGNED_CONTAINERS = "assigned-containers"


def drs_annotations(vendor: str, assignment: PodAssignment) -> dict[str, str] | None:
    """HAMi's DRS keys: the first GCU given, and each container's profile and slices."""
    ours = [c for c in assignment.containers if c.vendor == vendor and c.devices]
    if not ours:
        return None
    first = ours[0].devices[0]
    containers = {}
    for c in ours:
        piece = c.devices[0]
        parsed = parse_profile_name(piece.partition or "")
        containers[c.container] = {
            "allocated": False,
            "request": parsed[0] if parsed else 1,
            "profileName": piece.partition or "",
        }
    size = containers[ours[0].container]["request"]
    return {
        ASSIGNED: "false",
        ASSIGNED_INDEX: str(first.index),
        ASSIGNED_ID: str(first.index),
        ASSIGNED_MINOR: str(first.index),
        REQUEST_SIZE: str(size),
        ASSIGNED_CONTAINERS: json.dumps(containers, sort_keys=True, separators=(",", ":")),
    }


class EnflamePlugin:
    """The hooks of one Enflame vendor (*vendor* is its entry-point name)."""

    def __init__(self, vendor: str) -> None:
        self.vendor = vendor
        self.mode = mode_of(vendor)
        #: The settings ``xpushare_vendor`` loaded in this process (hooks given no spec).
        self.loaded = EnflameConfig()

    def _config(self, ctx: NodeContext) -> EnflameConfig:
        return settings.cached(EnflameConfig, VENDOR, ctx.config)

    @hookimpl
    def xpushare_vendor(self) -> VendorSpec:
        raw = settings.load_settings(VENDOR)
        config = settings.parse(EnflameConfig, VENDOR, raw)
        self.loaded = config
        whole = self.mode == "gcu"
        return VendorSpec(
            name=self.vendor,
            api_version=API_VERSION,
            display_name="Enflame GCU (whole)" if whole else "Enflame GCU (DRS partitions)",
            resource_names=config.names(self.vendor),
            config=raw,
        )

    # --- node side: the vendor's library thread -------------------------------------------

    @hookimpl
    def xpushare_startup(self, ctx: NodeContext) -> None:
        config = self._config(ctx)
        if config.mode != self.mode:
            raise VendorUnavailable(
                self.vendor,
                f"this node serves Enflame in mode {config.mode!r} (vendor "
                f"{VENDOR if config.mode == 'gcu' else DRS_VENDOR}); set mode: {self.mode} "
                f"in XPUSHARE_ENFLAME_CONFIG or the node agent's {self.vendor!r} section to "
                "serve this one instead",
            )
        library.open_efml(ctx, config)

    @hookimpl
    def xpushare_shutdown(self, ctx: NodeContext) -> None:
        efml = ctx.state.pop(library.STATE_KEY, None)
        if isinstance(efml, library.Efml):
            efml.shutdown()

    @hookimpl
    def xpushare_detect(self, ctx: NodeContext) -> list[Device]:
        return detect.detect(library.state(ctx), self._config(ctx), self.vendor, ctx.node_name)

    @hookimpl
    def xpushare_monitor(self, ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot:
        return monitor.sample(library.state(ctx), devices)

    @hookimpl
    def xpushare_check_health(
        self, ctx: NodeContext, devices: Sequence[Device]
    ) -> list[HealthEvent]:
        # EFML's event wait needs a listener per GCU300 device; polling covers every GCU.
        return health.check(library.state(ctx), devices)

    @hookimpl
    def xpushare_allocate(self, ctx: NodeContext, request: AllocateRequest) -> ContainerAllocation:
        return allocate.allocate(self._config(ctx), self.vendor, request)

    # --- scheduler side: pure --------------------------------------------------------------

    @hookimpl(wrapper=True)
    def xpushare_resource_request(
        self, vendor: VendorSpec, pod: PodView, container: ContainerView
    ) -> Generator[None, ContainerRequest | None, ContainerRequest | None]:
        parsed = yield
        return rules.adjust(parsed, vendor, pod, container)

    @hookimpl
    def xpushare_fit(
        self,
        request: ContainerRequest,
        node: NodeView,
        usage: Mapping[str, DeviceUsage],
        device_order: Sequence[str],
    ) -> FitResult | None:
        if self.mode != "drs":
            return None  # whole GCUs: the core's fit of exclusive whole devices
        return fitting.fit(request, node, usage, device_order)

    @hookimpl
    def xpushare_mutate_admission(
        self, container: ContainerView, index: int, request: ContainerRequest
    ) -> list[JsonPatchOp]:
        return rules.admission(self.loaded.names(self.vendor).count, container, index, request)

    @hookimpl
    def xpushare_patch_annotations(self, assignment: PodAssignment) -> dict[str, str] | None:
        if self.mode != "drs":
            return None
        return drs_annotations(self.vendor, assignment)


gcu = EnflamePlugin(VENDOR)
drs = EnflamePlugin(DRS_VENDOR)

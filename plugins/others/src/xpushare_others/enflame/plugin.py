"""The two Enflame vendor plugins, ``enflame`` (whole GCUs) and ``enflame-drs`` (DRS partitions).

Each entry point is an instance (``xpushare_others.enflame.plugin:gcu`` and ``:drs``) of one
class; what the two share is :mod:`xpushare_others.common.two_mode_plugin`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence

from xpushare import VendorUnavailable, hookimpl
from xpushare.models import (
    ContainerRequest,
    ContainerView,
    Device,
    DeviceUsage,
    FitResult,
    JsonPatchOp,
    NodeView,
    PodAssignment,
    ReleaseRequest,
)
from xpushare.native import NodeContext
from xpushare_others.common.two_mode_plugin import TwoModePlugin, TwoModeVendor
from xpushare_others.enflame import (
    allocate,
    detect,
    health,
    instances,
    library,
    monitor,
    profiles,
)
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


def drs_annotations(
    vendor: str, assignment: PodAssignment, profile_ids: Mapping[str, str]
) -> dict[str, str] | None:
    """HAMi's DRS keys: the first GCU given, and each container's profile and slices.

    *profile_ids* are the settings' ``drs_profiles``: the scheduler's hooks see the
    assignment, not the GCU the node agent read its ids from with efsmi, so a ``profileID``
    is the settings' (HAMi's tooling reads it; the agent cuts by the GCU's own id).
    """
    ours = [c for c in assignment.containers if c.vendor == vendor and c.devices]
    if not ours:
        return None
    first = ours[0].devices[0]
    containers: dict[str, dict[str, object]] = {}
    for c in ours:
        piece = c.devices[0]
        name = piece.partition or ""
        parsed = parse_profile_name(name)
        entry: dict[str, object] = {
            "allocated": False,
            "request": parsed[0] if parsed else 1,
            "profileName": name,
        }
        if name in profile_ids:
            entry["profileID"] = profile_ids[name]
        containers[c.container] = entry
    size = containers[ours[0].container]["request"]
    return {
        ASSIGNED: "false",
        ASSIGNED_INDEX: str(first.index),
        ASSIGNED_ID: str(first.index),
        ASSIGNED_MINOR: str(first.index),
        REQUEST_SIZE: str(size),
        ASSIGNED_CONTAINERS: json.dumps(containers, sort_keys=True, separators=(",", ":")),
    }


ENFLAME: TwoModeVendor[EnflameConfig, library.Efml] = TwoModeVendor(
    section=VENDOR,
    label="Enflame",
    vendors={"gcu": VENDOR, "drs": DRS_VENDOR},
    display_names={"gcu": "Enflame GCU (whole)", "drs": "Enflame GCU (DRS partitions)"},
    config_type=EnflameConfig,
    mode_of=mode_of,
    open_library=library.open_efml,
    state_key=library.STATE_KEY,
    library_type=library.Efml,
    library_state=library.state,
    detect=detect.detect,
    sample=monitor.sample,
    # EFML's event wait needs a listener per GCU300 device; polling covers every GCU.
    check_health=health.check,
    allocate=allocate.allocate,
    adjust_request=rules.adjust,
)


class EnflamePlugin(TwoModePlugin[EnflameConfig, library.Efml]):
    """The hooks of one Enflame vendor (*vendor* is its entry-point name)."""

    def __init__(self, vendor: str) -> None:
        super().__init__(ENFLAME, vendor)

    @hookimpl
    def xpushare_startup(self, ctx: NodeContext) -> None:
        config = self._config(ctx)
        cuts = config.mode == self.mode == "drs" and config.drs_cut
        if cuts and shutil.which(config.efsmi_path) is None:
            raise VendorUnavailable(
                self.vendor,
                f"Enflame's efsmi ({config.efsmi_path!r}), which cuts the DRS instances, is "
                "not on the node agent's PATH; mount it into the agent and set efsmi_path, or "
                "set drs_cut: false to book partitions without cutting them",
            )
        super().xpushare_startup(ctx)

    @hookimpl
    def xpushare_detect(self, ctx: NodeContext) -> list[Device]:
        config = self._config(ctx)
        source = profiles.source(ctx.state, config) if self.mode == "drs" else None
        return detect.detect(library.state(ctx), config, self.vendor, ctx.node_name, source)

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
        return drs_annotations(self.vendor, assignment, self.loaded.drs_profiles)


class EnflameDrsPlugin(EnflamePlugin):
    """``enflame-drs``: what it cuts at Allocate is destroyed when the pod has ended (whole
    GCUs create nothing, so ``enflame`` has no release hook)."""

    @hookimpl
    def xpushare_release(self, ctx: NodeContext, request: ReleaseRequest) -> None:
        config = self._config(ctx)
        if config.drs_cut:
            instances.release(config, request)


gcu = EnflamePlugin(VENDOR)
drs = EnflameDrsPlugin(DRS_VENDOR)

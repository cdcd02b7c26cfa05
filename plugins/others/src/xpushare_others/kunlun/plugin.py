"""The two Kunlun vendor plugins, ``kunlun`` (whole XPUs) and ``kunlun-vxpu`` (vXPU slices).

Each entry point is an instance (``xpushare_others.kunlun.plugin:xpu`` and ``:vxpu``) of one
class; what the two share is :mod:`xpushare_others.common.two_mode_plugin`.
"""

from __future__ import annotations

from collections.abc import Mapping

from xpushare import hookimpl
from xpushare.models import (
    ContainerRequest,
    ContainerView,
    DeviceUsage,
    FitResult,
    JsonPatchOp,
    NodeView,
    PodAssignment,
)
from xpushare_others.common.two_mode_plugin import TwoModePlugin, TwoModeVendor
from xpushare_others.kunlun import allocate, detect, health, library, monitor
from xpushare_others.kunlun import fit as fitting
from xpushare_others.kunlun import request as rules
from xpushare_others.kunlun.config import VENDOR, VXPU_VENDOR, KunlunConfig, mode_of

#: HAMi's pod annotation naming the XPU indices for Kunlun's own device plugin (§8.1).
DEVICE_INDEX_ANNOTATION = "BAIDU_COM_DEVICE_IDX"

KUNLUN: TwoModeVendor[KunlunConfig, library.Xpuml] = TwoModeVendor(
    section=VENDOR,
    label="Kunlun",
    vendors={"xpu": VENDOR, "vxpu": VXPU_VENDOR},
    display_names={"xpu": "Kunlunxin XPU (whole)", "vxpu": "Kunlunxin vXPU (24/48/96 GiB)"},
    config_type=KunlunConfig,
    mode_of=mode_of,
    open_library=library.open_xpuml,
    state_key=library.STATE_KEY,
    library_type=library.Xpuml,
    library_state=library.state,
    detect=detect.detect,
    sample=monitor.sample,
    # XPUML has no event wait: each call polls once and returns at once.
    check_health=health.check,
    allocate=allocate.allocate,
    adjust_request=rules.adjust,
)


class KunlunPlugin(TwoModePlugin[KunlunConfig, library.Xpuml]):
    """The hooks of one Kunlun vendor (*vendor* is its entry-point name)."""

    def __init__(self, vendor: str) -> None:
        super().__init__(KUNLUN, vendor)

    @hookimpl
    def xpushare_fit(
        self, request: ContainerRequest, node: NodeView, usage: Mapping[str, DeviceUsage]
    ) -> FitResult:
        return fitting.fit(request, node, usage, self.loaded.max_handles)

    @hookimpl
    def xpushare_score(
        self,
        request: ContainerRequest,
        node: NodeView,
        fit: FitResult,
        usage: Mapping[str, DeviceUsage],
    ) -> float | None:
        if self.mode != "xpu":
            return None  # HAMi's vXPU backend has no node score
        return fitting.score(request, fit, usage, node)

    @hookimpl
    def xpushare_mutate_admission(
        self, container: ContainerView, index: int, request: ContainerRequest
    ) -> list[JsonPatchOp]:
        return rules.admission(self.loaded.names(self.vendor).memory, container, index, request)

    @hookimpl
    def xpushare_patch_annotations(self, assignment: PodAssignment) -> dict[str, str] | None:
        if self.mode != "xpu":
            return None
        # HAMi writes the indices of the last container with XPUs (its loop overwrites).
        ours = [c for c in assignment.containers if c.vendor == self.vendor and c.devices]
        if not ours:
            return None
        return {DEVICE_INDEX_ANNOTATION: ",".join(str(d.index) for d in ours[-1].devices)}


xpu = KunlunPlugin(VENDOR)
vxpu = KunlunPlugin(VXPU_VENDOR)

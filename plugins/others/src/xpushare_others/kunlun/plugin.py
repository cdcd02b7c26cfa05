"""The two Kunlun vendor plugins, ``kunlun`` (whole XPUs) and ``kunlun-vxpu`` (vXPU slices).

Why one class for both: they drive the same library and hardware and differ only in their
resource names, request rules and which ``mode`` a node serves, so each entry point is an
instance (``xpushare_others.kunlun.plugin:xpu`` and ``:vxpu``) whose hooks are thin calls into
the modules that do the work. The instance on a node whose ``mode`` is the other one is
inactive there, with that reason.
"""

from __future__ import annotations

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
from xpushare_others.kunlun import allocate, detect, health, library, monitor
from xpushare_others.kunlun import fit as fitting
from xpushare_others.kunlun import request as rules
from xpushare_others.kunlun.config import VENDOR, VXPU_VENDOR, KunlunConfig, mode_of

#: HAMi's pod annotation naming the XPU indices for Kunlun's own device plugin (§8.1).
DEVICE_INDEX_ANNOTATION = "BAIDU_COM_DEVICE_IDX"


class KunlunPlugin:
    """The hooks of one Kunlun vendor (*vendor* is its entry-point name)."""

    def __init__(self, vendor: str) -> None:
        self.vendor = vendor
        self.mode = mode_of(vendor)
        #: The settings ``xpushare_vendor`` loaded in this process (hooks given no spec).
        self.loaded = KunlunConfig()

    def _config(self, ctx: NodeContext) -> KunlunConfig:
        return settings.cached(KunlunConfig, VENDOR, ctx.config)

    @hookimpl
    def xpushare_vendor(self) -> VendorSpec:
        raw = settings.load_settings(VENDOR)
        config = settings.parse(KunlunConfig, VENDOR, raw)
        self.loaded = config
        whole = self.mode == "xpu"
        return VendorSpec(
            name=self.vendor,
            api_version=API_VERSION,
            display_name="Kunlunxin XPU (whole)" if whole else "Kunlunxin vXPU (24/48/96 GiB)",
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
                f"this node serves Kunlun in mode {config.mode!r} (vendor "
                f"{VENDOR if config.mode == 'xpu' else VXPU_VENDOR}); set mode: {self.mode} "
                f"in XPUSHARE_KUNLUN_CONFIG or the node agent's {self.vendor!r} section to "
                "serve this one instead",
            )
        library.open_xpuml(ctx, config)

    @hookimpl
    def xpushare_shutdown(self, ctx: NodeContext) -> None:
        xpuml = ctx.state.pop(library.STATE_KEY, None)
        if isinstance(xpuml, library.Xpuml):
            xpuml.shutdown()

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
        # XPUML has no event wait: each call polls once and returns at once.
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
        self, request: ContainerRequest, node: NodeView, usage: Mapping[str, DeviceUsage]
    ) -> FitResult:
        return fitting.fit(request, node, usage)

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

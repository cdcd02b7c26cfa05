"""The Vastai vendor plugin (entry point ``xpushare_others.vastai.plugin:vastai``).

Requests are slot-only (HAMi's Vastai backend); fit and score are Vastai's own in die mode
(:mod:`xpushare_others.vastai.fit`) and the core's on whole-card nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xpushare import hookimpl
from xpushare.models import ContainerRequest, Device, DeviceUsage, FitResult, NodeView
from xpushare_others.common.library_plugin import LibraryVendor, RulesVendorPlugin, slot_request
from xpushare_others.vastai import allocate, detect, health, library, monitor
from xpushare_others.vastai import fit as vastai_fit
from xpushare_others.vastai.config import VENDOR, VastaiConfig

VASTAI: LibraryVendor[VastaiConfig, library.Vaml] = LibraryVendor(
    name=VENDOR,
    config_type=VastaiConfig,
    display_name=lambda config: f"Vastai ({config.device_strategy} mode)",
    names=VastaiConfig.names,
    open_library=library.open_vaml,
    close_library=library.close_vaml,
    library_state=library.state,
    detect=detect.detect,
    sample=monitor.sample,
    check_health=health.check,
    allocate=allocate.allocate,
    adjust_request=slot_request,
)


class VastaiPlugin(RulesVendorPlugin[VastaiConfig, library.Vaml]):
    @hookimpl
    def xpushare_fit(
        self,
        request: ContainerRequest,
        node: NodeView,
        usage: Mapping[str, DeviceUsage],
        device_order: Sequence[str],
    ) -> FitResult | None:
        return vastai_fit.fit(request, node, usage, device_order)

    @hookimpl
    def xpushare_fit_applies(self, devices: Sequence[Device]) -> bool | None:
        # Whole-card nodes are left to the core's fit for every request (fit.fit answers None).
        return vastai_fit.die_mode(devices)

    @hookimpl
    def xpushare_score(self, node: NodeView, fit: FitResult) -> float | None:
        return vastai_fit.score(node, fit)


vastai = VastaiPlugin(VASTAI)

"""The Hygon DCU vendor plugin (entry point ``xpushare_others.hygon.plugin:hygon``)."""

from __future__ import annotations

from xpushare import hookimpl
from xpushare.models import ReleaseRequest
from xpushare.native import NodeContext
from xpushare_others.common.library_plugin import LibraryVendor, RulesVendorPlugin
from xpushare_others.hygon import allocate, detect, health, library, monitor, request
from xpushare_others.hygon.config import VENDOR, HygonConfig

HYGON: LibraryVendor[HygonConfig, library.Rsmi] = LibraryVendor(
    name=VENDOR,
    config_type=HygonConfig,
    display_name=lambda _: "Hygon DCU",
    names=HygonConfig.names,
    open_library=library.open_rsmi,
    close_library=library.close_rsmi,
    library_state=library.state,
    detect=detect.detect,
    sample=monitor.sample,
    check_health=health.check,
    allocate=allocate.allocate,
    memory_unit_mib=lambda config: config.memory_factor,
    adjust_request=request.adjust,
)


class HygonPlugin(RulesVendorPlugin[HygonConfig, library.Rsmi]):
    @hookimpl
    def xpushare_release(self, ctx: NodeContext, request: ReleaseRequest) -> None:
        allocate.release(self.config(ctx), request)


hygon = HygonPlugin(HYGON)

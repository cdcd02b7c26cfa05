"""The Biren vendor plugin (entry point ``xpushare_others.biren.plugin:biren``).

Fit is the core's: with the slot-only request (:mod:`xpushare_others.common.slots`) it is
HAMi's Biren ``Fit`` (health, UUIDs, ``Count > Used``, mutex).
"""

from __future__ import annotations

from xpushare_others.biren import allocate, detect, health, library, monitor
from xpushare_others.biren.config import VENDOR, BirenConfig
from xpushare_others.common.library_plugin import LibraryVendor, RulesVendorPlugin, slot_request

BIREN: LibraryVendor[BirenConfig, library.Brml] = LibraryVendor(
    name=VENDOR,
    config_type=BirenConfig,
    display_name=lambda _: "Biren GPU",
    names=BirenConfig.names,
    open_library=library.open_brml,
    close_library=library.close_brml,
    library_state=library.state,
    detect=detect.detect,
    sample=monitor.sample,
    check_health=health.check,
    allocate=allocate.allocate,
    adjust_request=slot_request,
)

biren: RulesVendorPlugin[BirenConfig, library.Brml] = RulesVendorPlugin(BIREN)

"""The T-Head vendor plugin (entry point ``xpushare_others.thead.plugin:thead``).

Requests and fit are the core's: memory in MiB or percent, compute in percent, shared by
``share_slots`` containers per PPU (GPUStack's sliced form, one slice per container).
"""

from __future__ import annotations

from xpushare_others.common.library_plugin import LibraryVendor, LibraryVendorPlugin
from xpushare_others.thead import allocate, detect, health, library, monitor
from xpushare_others.thead.config import VENDOR, TheadConfig

THEAD: LibraryVendor[TheadConfig, library.Hgml] = LibraryVendor(
    name=VENDOR,
    config_type=TheadConfig,
    display_name=lambda _: "T-Head PPU",
    names=TheadConfig.names,
    open_library=library.open_hgml,
    close_library=library.close_hgml,
    library_state=library.state,
    detect=detect.detect,
    sample=monitor.sample,
    check_health=health.check,
    allocate=allocate.allocate,
)

thead: LibraryVendorPlugin[TheadConfig, library.Hgml] = LibraryVendorPlugin(THEAD)

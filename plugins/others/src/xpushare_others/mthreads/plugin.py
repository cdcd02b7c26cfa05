"""The Moore Threads vendor plugin (entry point ``xpushare_others.mthreads.plugin:mthreads``)."""

from __future__ import annotations

from xpushare_others.common.library_plugin import LibraryVendor, RulesVendorPlugin
from xpushare_others.mthreads import allocate, detect, health, library, monitor
from xpushare_others.mthreads import request as rules
from xpushare_others.mthreads.config import CORES_PER_GPU, MEMORY_UNIT_MIB, VENDOR, MthreadsConfig

MTHREADS: LibraryVendor[MthreadsConfig, library.Mtml] = LibraryVendor(
    name=VENDOR,
    config_type=MthreadsConfig,
    display_name=lambda _: "Moore Threads GPU",
    names=MthreadsConfig.names,
    open_library=library.open_mtml,
    close_library=library.close_mtml,
    library_state=library.state,
    detect=detect.detect,
    sample=monitor.sample,
    check_health=health.check,
    allocate=allocate.allocate,
    memory_unit_mib=lambda _: MEMORY_UNIT_MIB,
    compute_total=CORES_PER_GPU,
    adjust_request=rules.adjust,
)


mthreads: RulesVendorPlugin[MthreadsConfig, library.Mtml] = RulesVendorPlugin(MTHREADS)

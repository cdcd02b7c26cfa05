"""The Iluvatar vendor plugin (entry point ``xpushare_others.iluvatar.plugin:iluvatar``)."""

from __future__ import annotations

from xpushare import hookimpl
from xpushare.models import ContainerView, JsonPatchOp, PodView
from xpushare_others.common.library_plugin import LibraryVendor, RulesVendorPlugin
from xpushare_others.iluvatar import allocate, detect, health, library, monitor, request
from xpushare_others.iluvatar.config import MEMORY_UNIT_MIB, VENDOR, IluvatarConfig

ILUVATAR: LibraryVendor[IluvatarConfig, library.Ixml] = LibraryVendor(
    name=VENDOR,
    config_type=IluvatarConfig,
    display_name=lambda config: f"Iluvatar CoreX {config.chip}",
    names=IluvatarConfig.names,
    open_library=library.open_ixml,
    close_library=library.close_ixml,
    library_state=library.state,
    detect=detect.detect,
    sample=monitor.sample,
    check_health=health.check,
    allocate=allocate.allocate,
    memory_unit_mib=lambda _: MEMORY_UNIT_MIB,
    adjust_request=lambda parsed, vendor, pod, container: request.adjust(parsed),
)


class IluvatarPlugin(RulesVendorPlugin[IluvatarConfig, library.Ixml]):
    @hookimpl
    def xpushare_mutate_admission(
        self, pod: PodView, container: ContainerView, index: int
    ) -> list[JsonPatchOp]:
        return request.admission(pod, container, index)


iluvatar = IluvatarPlugin(ILUVATAR)

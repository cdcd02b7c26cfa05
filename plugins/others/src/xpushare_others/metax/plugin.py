"""The MetaX vendor plugin (entry point ``xpushare_others.metax.plugin:metax``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xpushare import hookimpl
from xpushare.models import (
    ContainerRequest,
    ContainerView,
    DeviceUsage,
    FitResult,
    JsonPatchOp,
    NodeView,
    PodView,
)
from xpushare_others.common.library_plugin import LibraryVendor, RulesVendorPlugin
from xpushare_others.metax import allocate, detect, health, library, monitor, score
from xpushare_others.metax import fit as sgpu_fit
from xpushare_others.metax import request as rules
from xpushare_others.metax.config import SGPU_MEMORY_UNIT_MIB, VENDOR, MetaxConfig

METAX: LibraryVendor[MetaxConfig, library.Mxsml] = LibraryVendor(
    name=VENDOR,
    config_type=MetaxConfig,
    display_name=lambda config: f"MetaX GPU ({config.mode} mode)",
    names=MetaxConfig.names,
    open_library=library.open_mxsml,
    close_library=library.close_mxsml,
    library_state=library.state,
    detect=detect.detect,
    sample=monitor.sample,
    check_health=health.check,
    allocate=allocate.allocate,
    memory_unit_mib=lambda _: SGPU_MEMORY_UNIT_MIB,
    adjust_request=rules.adjust,
)


class MetaxPlugin(RulesVendorPlugin[MetaxConfig, library.Mxsml]):
    @hookimpl
    def xpushare_mutate_admission(
        self, pod: PodView, container: ContainerView, request: ContainerRequest
    ) -> list[JsonPatchOp]:
        return rules.admission(pod, container, request)

    @hookimpl
    def xpushare_fit(
        self,
        request: ContainerRequest,
        node: NodeView,
        usage: Mapping[str, DeviceUsage],
        device_order: Sequence[str],
        memory_overcommit: float,
    ) -> FitResult | None:
        # No xpushare_fit_applies: the class and QoS rules depend on usage, not the inventory.
        return sgpu_fit.fit(request, node, usage, device_order, memory_overcommit)

    @hookimpl
    def xpushare_score(
        self,
        request: ContainerRequest,
        node: NodeView,
        fit: FitResult,
        usage: Mapping[str, DeviceUsage],
    ) -> float | None:
        return score.hook_score(request, node, fit, usage)


metax = MetaxPlugin(METAX)

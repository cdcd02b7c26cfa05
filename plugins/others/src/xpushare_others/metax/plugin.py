"""The MetaX vendor plugin: the hook implementations, each a thin call into its module."""

from __future__ import annotations

from collections.abc import Generator, Sequence

from xpushare import API_VERSION, hookimpl
from xpushare.models import (
    AllocateRequest,
    ContainerAllocation,
    ContainerRequest,
    ContainerView,
    Device,
    HealthEvent,
    JsonPatchOp,
    MonitorSnapshot,
    PodView,
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_others.common import settings
from xpushare_others.metax import allocate, detect, health, library, monitor
from xpushare_others.metax import request as rules
from xpushare_others.metax.config import SGPU_MEMORY_UNIT_MIB, VENDOR, MetaxConfig


def _config(ctx: NodeContext) -> MetaxConfig:
    return settings.cached(MetaxConfig, VENDOR, ctx.config)


@hookimpl
def xpushare_vendor() -> VendorSpec:
    raw = settings.load_settings(VENDOR)
    config = settings.parse(MetaxConfig, VENDOR, raw)
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name=f"MetaX GPU ({config.mode} mode)",
        resource_names=config.names(),
        memory_unit_mib=SGPU_MEMORY_UNIT_MIB,
        config=raw,
    )


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    library.open_mxsml(ctx, _config(ctx))


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    # MXSML has no shutdown call; the library stays mapped for the process.
    ctx.state.pop(library.STATE_KEY, None)


@hookimpl
def xpushare_detect(ctx: NodeContext) -> list[Device]:
    return detect.detect(library.state(ctx), _config(ctx))


@hookimpl
def xpushare_monitor(ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot:
    return monitor.sample(library.state(ctx), devices)


@hookimpl
def xpushare_check_health(ctx: NodeContext, devices: Sequence[Device]) -> list[HealthEvent]:
    return health.check(library.state(ctx), devices)


@hookimpl
def xpushare_allocate(ctx: NodeContext, request: AllocateRequest) -> ContainerAllocation:
    return allocate.allocate(_config(ctx), request)


@hookimpl(wrapper=True)
def xpushare_resource_request(
    vendor: VendorSpec, pod: PodView, container: ContainerView
) -> Generator[None, ContainerRequest | None, ContainerRequest | None]:
    parsed = yield
    return rules.adjust(parsed, vendor, pod, container)


@hookimpl
def xpushare_mutate_admission(
    pod: PodView, container: ContainerView, request: ContainerRequest
) -> list[JsonPatchOp]:
    return rules.admission(pod, container, request)

"""The Hygon DCU vendor plugin: the hook implementations, each a thin call into its module."""

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
    MonitorSnapshot,
    PodView,
    ReleaseRequest,
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_others.common import settings
from xpushare_others.hygon import allocate, detect, health, library, monitor, request
from xpushare_others.hygon.config import VENDOR, HygonConfig


def _config(ctx: NodeContext) -> HygonConfig:
    return settings.cached(HygonConfig, VENDOR, ctx.config)


@hookimpl
def xpushare_vendor() -> VendorSpec:
    raw = settings.load_settings(VENDOR)
    config = settings.parse(HygonConfig, VENDOR, raw)
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name="Hygon DCU",
        resource_names=config.names(),
        memory_unit_mib=config.memory_factor,
        config=raw,
    )


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    library.open_rsmi(ctx, _config(ctx))


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    library.close_rsmi(ctx)


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


@hookimpl
def xpushare_release(ctx: NodeContext, request: ReleaseRequest) -> None:
    allocate.release(_config(ctx), request)


@hookimpl(wrapper=True)
def xpushare_resource_request(
    vendor: VendorSpec, pod: PodView, container: ContainerView
) -> Generator[None, ContainerRequest | None, ContainerRequest | None]:
    parsed = yield
    return request.adjust(parsed, vendor, pod, container)

"""The Vastai vendor plugin: the hook implementations, each a thin call into its module."""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence

from xpushare import API_VERSION, hookimpl
from xpushare.models import (
    AllocateRequest,
    ContainerAllocation,
    ContainerRequest,
    ContainerView,
    Device,
    DeviceUsage,
    FitResult,
    HealthEvent,
    MonitorSnapshot,
    NodeView,
    PodView,
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_others.common import settings, slots
from xpushare_others.vastai import allocate, detect, health, library, monitor
from xpushare_others.vastai import fit as vastai_fit
from xpushare_others.vastai.config import VENDOR, VastaiConfig


def _config(ctx: NodeContext) -> VastaiConfig:
    return settings.cached(VastaiConfig, VENDOR, ctx.config)


@hookimpl
def xpushare_vendor() -> VendorSpec:
    raw = settings.load_settings(VENDOR)
    config = settings.parse(VastaiConfig, VENDOR, raw)
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name=f"Vastai ({config.device_strategy} mode)",
        resource_names=config.names(),
        config=raw,
    )


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    library.open_vaml(ctx, _config(ctx))


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    library.close_vaml(ctx)


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
    return slots.slot_request(parsed, pod)


@hookimpl
def xpushare_fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
) -> FitResult | None:
    return vastai_fit.fit(request, node, usage, device_order)


@hookimpl
def xpushare_fit_applies(devices: Sequence[Device]) -> bool | None:
    # Whole-card nodes are left to the core's fit for every request (fit.fit answers None).
    return vastai_fit.die_mode(devices)


@hookimpl
def xpushare_score(node: NodeView, fit: FitResult) -> float | None:
    return vastai_fit.score(node, fit)

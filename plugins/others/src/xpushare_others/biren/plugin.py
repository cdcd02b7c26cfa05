"""The Biren vendor plugin: the hook implementations, each a thin call into its module.

Fit is the core's: with the slot-only request (:mod:`xpushare_others.common.slots`) it is
HAMi's Biren ``Fit`` (health, UUIDs, ``Count > Used``, mutex).
"""

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
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_others.biren import allocate, detect, health, library, monitor
from xpushare_others.biren.config import VENDOR, BirenConfig
from xpushare_others.common import settings, slots


def _config(ctx: NodeContext) -> BirenConfig:
    return settings.cached(BirenConfig, VENDOR, ctx.config)


@hookimpl
def xpushare_vendor() -> VendorSpec:
    raw = settings.load_settings(VENDOR)
    config = settings.parse(BirenConfig, VENDOR, raw)
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name="Biren GPU",
        resource_names=config.names(),
        config=raw,
    )


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    library.open_brml(ctx, _config(ctx))


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    library.close_brml(ctx)


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

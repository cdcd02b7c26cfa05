"""The T-Head vendor plugin: the hook implementations, each a thin call into its module.

Requests and fit are the core's: memory in MiB or percent, compute in percent, shared by
``share_slots`` containers per PPU (GPUStack's sliced form, one slice per container).
"""

from __future__ import annotations

from collections.abc import Sequence

from xpushare import API_VERSION, hookimpl
from xpushare.models import (
    AllocateRequest,
    ContainerAllocation,
    Device,
    HealthEvent,
    MonitorSnapshot,
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_others.common import settings
from xpushare_others.thead import allocate, detect, health, library, monitor
from xpushare_others.thead.config import VENDOR, TheadConfig


def _config(ctx: NodeContext) -> TheadConfig:
    return settings.cached(TheadConfig, VENDOR, ctx.config)


@hookimpl
def xpushare_vendor() -> VendorSpec:
    raw = settings.load_settings(VENDOR)
    config = settings.parse(TheadConfig, VENDOR, raw)
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name="T-Head PPU",
        resource_names=config.names(),
        config=raw,
    )


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    library.open_hgml(ctx, _config(ctx))


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    library.close_hgml(ctx)


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

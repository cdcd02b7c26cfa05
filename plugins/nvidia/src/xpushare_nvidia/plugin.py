"""The NVIDIA vendor's hook implementations: thin calls into the modules that do the work.

Registered under the ``xpushare.vendors`` entry point ``nvidia``. Node-side hooks run on the
vendor's library thread (the host's doing), so every NVML call of this package is made
there; scheduler-side hooks (fit, score) are pure functions of the inventory.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from xpushare import API_VERSION, hookimpl
from xpushare.models import (
    AdmissionGuard,
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
    ReleaseRequest,
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_nvidia import allocate, detect, health, library, modes, monitor
from xpushare_nvidia import fit as fitting
from xpushare_nvidia.config import NvidiaConfig, resource_names

_CONFIG_KEY = "config"


def _config(ctx: NodeContext) -> NvidiaConfig:
    found = ctx.state.get(_CONFIG_KEY)
    if not isinstance(found, NvidiaConfig):
        found = NvidiaConfig.from_mapping(ctx.config)
        ctx.state[_CONFIG_KEY] = found
    return found


@hookimpl
def xpushare_vendor() -> VendorSpec:
    return VendorSpec(
        name=library.VENDOR,
        api_version=API_VERSION,
        display_name="NVIDIA GPUs (NVML; in-container limits by HAMi-core)",
        resource_names=resource_names(os.environ),
    )


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    library.open_nvml(ctx, _config(ctx))


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    nvml = ctx.state.get(library.STATE_KEY)
    if isinstance(nvml, library.Nvml):
        health.close(nvml)
    library.close_nvml(ctx)


@hookimpl
def xpushare_detect(ctx: NodeContext) -> list[Device]:
    return detect.detect(library.state(ctx), _config(ctx))


@hookimpl
def xpushare_monitor(ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot:
    return monitor.monitor(library.state(ctx), _config(ctx), devices)


@hookimpl
def xpushare_check_health(
    ctx: NodeContext, devices: Sequence[Device], wait_s: float
) -> list[HealthEvent] | None:
    config = _config(ctx)
    if not config.health_checks:
        return None
    return health.check(library.state(ctx), config, devices, wait_s)


@hookimpl
def xpushare_allocate(ctx: NodeContext, request: AllocateRequest) -> ContainerAllocation:
    return allocate.allocate(library.state(ctx), _config(ctx), request)


@hookimpl
def xpushare_release(ctx: NodeContext, request: ReleaseRequest) -> None:
    nvml = ctx.state.get(library.STATE_KEY)
    allocate.release(nvml if isinstance(nvml, library.Nvml) else None, _config(ctx), request)


@hookimpl(wrapper=True)
def xpushare_resource_request(
    vendor: VendorSpec, pod: PodView, container: ContainerView
) -> Generator[None, ContainerRequest | None, ContainerRequest | None]:
    # The core parses counts and memory; the pod's mode and MIG profile are added here.
    parsed = yield
    if parsed is None or parsed.vendor != library.VENDOR:
        return parsed
    mode, profile = modes.request_mode(pod), modes.request_profile(pod)
    if mode is None and profile is None:
        return parsed
    return parsed.model_copy(update={"mode": mode, "partition": profile or parsed.partition})


@hookimpl
def xpushare_fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
    memory_overcommit: float,
) -> FitResult | None:
    return fitting.fit(request, node, usage, device_order, memory_overcommit)


@hookimpl
def xpushare_fit_applies(devices: Sequence[Device]) -> bool | None:
    return fitting.applies(devices)


@hookimpl
def xpushare_score(
    request: ContainerRequest, node: NodeView, fit: FitResult, usage: Mapping[str, DeviceUsage]
) -> float | None:
    return fitting.score(request, node, fit, usage)


@hookimpl
def xpushare_admission_guard(config: Mapping[str, Any]) -> AdmissionGuard:
    # The scheduler gets the same `nvidia` section as the node agents, so the paths guarded
    # are the ones Allocate mounts.
    return allocate.admission_guard(NvidiaConfig.from_mapping(config))

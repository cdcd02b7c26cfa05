"""The AMD vendor plugin's hooks (entry point ``amd``): the whole vendor contract for AMD GPUs.

Node side (on the vendor's library thread, xpushare.hookspecs): startup loads ROCm's
``libamd_smi.so`` and the ``amdsmi`` wrapper (:mod:`~xpushare_amd.library`), detect and
monitor read the GPUs (:mod:`~xpushare_amd.detect`, :mod:`~xpushare_amd.monitor`),
allocate gives containers their device nodes (:mod:`~xpushare_amd.allocate`).

Scheduler side (pure): requests are parsed by the core with HAMi's AMD default of 100 %
compute when ``amd.com/gpucores`` is omitted; the fit books compute units and guards
partitions (:mod:`~xpushare_amd.fit`); the score prefers GPUs joined by XGMI.

Not implemented on purpose: ``xpushare_patch_annotations`` (the core's assignment annotation
carries everything Allocate needs; writing HAMi's ``hami.io/amd-devices-allocated`` too would
make the core's HAMi reader count each pod twice) and ``xpushare_mutate_admission`` (AMD
has no isolation-bypass variable to refuse).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any

from xpushare.errors import VendorUnavailable
from xpushare.hookspecs import hookimpl
from xpushare.models import (
    API_VERSION,
    AllocateRequest,
    ContainerAllocation,
    ContainerRequest,
    ContainerView,
    Device,
    DeviceUsage,
    FitResult,
    HealthEvent,
    LinkKind,
    MonitorSnapshot,
    NodeView,
    PodView,
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_amd import allocate, detect, health, library, monitor
from xpushare_amd import config as config_mod
from xpushare_amd import fit as amd_fit
from xpushare_amd.config import VENDOR

_SMI = "smi"
_HANDLES = "handles"


_CONFIG = "config"


@hookimpl
def xpushare_vendor() -> VendorSpec:
    config = config_mod.parse(config_mod.load_file())
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name="AMD GPUs (ROCm, AMD SMI)",
        resource_names=config.resource_names,
        config=config.model_dump(mode="json", exclude_none=True),
    )


def _smi(ctx: NodeContext) -> library.Smi:
    smi = ctx.state.get(_SMI)
    if not isinstance(smi, library.Smi):
        raise VendorUnavailable(VENDOR, "AMD SMI is not started (xpushare_startup did not run)")
    return smi


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    try:
        config = config_mod.parse(ctx.config)
    except ValueError as exc:
        raise VendorUnavailable(VENDOR, f"{exc}; fix the amd section of the configuration") from exc
    ctx.state[_CONFIG] = config
    ctx.state[_SMI] = library.start(ctx, config)
    ctx.state[_HANDLES] = {}


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    smi = ctx.state.pop(_SMI, None)
    ctx.state.clear()
    if isinstance(smi, library.Smi):
        library.stop(smi)


@hookimpl
def xpushare_detect(ctx: NodeContext) -> list[Device]:
    config: config_mod.AmdConfig = ctx.state[_CONFIG]
    devices, handles = detect.detect(_smi(ctx), config.share_slots)
    ctx.state[_HANDLES] = handles
    return devices


@hookimpl
def xpushare_monitor(ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot:
    return monitor.snapshot(_smi(ctx), devices, ctx.state.get(_HANDLES, {}))


@hookimpl
def xpushare_check_health(ctx: NodeContext, devices: Sequence[Device]) -> list[HealthEvent]:
    return health.health_changes(_smi(ctx), devices, ctx.state.get(_HANDLES, {}))


@hookimpl
def xpushare_allocate(request: AllocateRequest) -> ContainerAllocation:
    return allocate.allocate(request)


@hookimpl(wrapper=True)
def xpushare_resource_request(
    vendor: VendorSpec, pod: PodView, container: ContainerView
) -> Generator[None, ContainerRequest | None, ContainerRequest | None]:
    """The core's parse, with HAMi's AMD rules: no ``amd.com/gpucores`` means 100 %, and a
    ``use-gputype`` of separators only (``", "``) accepts no GPU."""
    request = yield
    if request is None:
        return request
    if not request.models_include:
        # The core drops empty entries; HAMi's AMD match keeps the annotation's constraint.
        domain = vendor.resource_names.count.split("/", 1)[0]
        use_type = pod.annotations.get(f"{domain}/use-gputype", "")
        if use_type.strip():
            request = request.model_copy(update={"models_include": (amd_fit.NO_MODEL,)})
    compute = vendor.resource_names.compute
    if compute is None:
        return request
    if compute in container.limits or compute in container.requests:
        return request
    default = int(vendor.config.get("default_compute_percent", config_mod.DEFAULT_COMPUTE_PERCENT))
    return request.model_copy(update={"compute_percent": default})


@hookimpl
def xpushare_fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
    memory_overcommit: float,
) -> FitResult:
    return amd_fit.fit(request, node, usage, device_order, memory_overcommit)


@hookimpl
def xpushare_score(node: NodeView, fit: FitResult) -> float | None:
    """For several GPUs, the share of their pairs joined by XGMI (1.0: all of them)."""
    picked = [s.device_id for s in fit.devices]
    if len(picked) < 2:
        return None
    by_id: dict[str, Any] = {d.id: d for d in node.devices}
    wanted = set(picked)
    pairs = len(picked) * (len(picked) - 1)
    linked = sum(
        1
        for device_id in picked
        for link in getattr(by_id.get(device_id), "links", ())
        if link.peer in wanted and link.kind in (LinkKind.XGMI, LinkKind.SAME_BOARD)
    )
    return min(1.0, linked / pairs)

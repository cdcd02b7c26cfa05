"""The AMD vendor plugin's hooks (entry point ``amd``): the whole vendor contract for AMD GPUs.

Node side (on the vendor's library thread, xpushare.hookspecs): startup loads ROCm's
``libamd_smi.so`` and the ``amdsmi`` wrapper (:mod:`~xpushare_amd.binding`), detect and
monitor read the GPUs (:mod:`~xpushare_amd.inventory`, :mod:`~xpushare_amd.telemetry`),
allocate gives containers their device nodes (:mod:`~xpushare_amd.allocation`).

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
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_amd import allocation, binding, inventory, telemetry
from xpushare_amd import fit as amd_fit
from xpushare_amd.names import (
    CONFIG_SHARE_SLOTS,
    DEFAULT_COMPUTE_PERCENT,
    DEFAULT_RESOURCES,
    DEFAULT_SHARE_SLOTS,
    VENDOR,
)

_SMI = "smi"
_HANDLES = "handles"


@hookimpl
def xpushare_vendor() -> VendorSpec:
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name="AMD GPUs (ROCm, AMD SMI)",
        resource_names=DEFAULT_RESOURCES,
        config={CONFIG_SHARE_SLOTS: DEFAULT_SHARE_SLOTS},
    )


def _smi(ctx: NodeContext) -> binding.Smi:
    smi = ctx.state.get(_SMI)
    if not isinstance(smi, binding.Smi):
        raise VendorUnavailable(VENDOR, "AMD SMI is not started (xpushare_startup did not run)")
    return smi


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    ctx.state[_SMI] = binding.start(ctx)
    ctx.state[_HANDLES] = {}


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    smi = ctx.state.pop(_SMI, None)
    ctx.state.clear()
    if isinstance(smi, binding.Smi):
        binding.stop(smi)


@hookimpl
def xpushare_detect(ctx: NodeContext) -> list[Device]:
    slots = int(ctx.config.get(CONFIG_SHARE_SLOTS, DEFAULT_SHARE_SLOTS))
    devices, handles = inventory.detect(_smi(ctx), slots)
    ctx.state[_HANDLES] = handles
    return devices


@hookimpl
def xpushare_monitor(ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot:
    return telemetry.snapshot(_smi(ctx), devices, ctx.state.get(_HANDLES, {}))


@hookimpl
def xpushare_check_health(ctx: NodeContext, devices: Sequence[Device]) -> list[HealthEvent]:
    return telemetry.health_changes(_smi(ctx), devices, ctx.state.get(_HANDLES, {}))


@hookimpl
def xpushare_allocate(request: AllocateRequest) -> ContainerAllocation:
    return allocation.allocate(request)


@hookimpl(wrapper=True)
def xpushare_resource_request(
    vendor: VendorSpec, container: ContainerView
) -> Generator[None, ContainerRequest | None, ContainerRequest | None]:
    """The core's parse, with HAMi's AMD default: no ``amd.com/gpucores`` means 100 %."""
    request = yield
    compute = vendor.resource_names.compute
    if request is None or compute is None:
        return request
    if compute in container.limits or compute in container.requests:
        return request
    return request.model_copy(update={"compute_percent": DEFAULT_COMPUTE_PERCENT})


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

"""The AWS Neuron vendor plugin (``awsneuron``): hooks that are thin calls into the modules
that do the work. No native library: the node side reads the Neuron driver's sysfs on the
vendor's thread like any vendor's library calls."""

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
    PodAssignment,
    PodView,
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_others.common import settings
from xpushare_others.neuron import allocate, cores, detect, health, monitor
from xpushare_others.neuron import fit as fitting
from xpushare_others.neuron import request as rules
from xpushare_others.neuron.config import VENDOR, NeuronConfig

#: HAMi's pod annotations for the Neuron device plugin (hami-protocol.md §8.1).
ASSIGNED_IDS = "AWS_NEURON_IDS"
ALLOCATED = "NEURON_ALLOCATED"
RESOURCE_TYPE = "NEURON_RESOURCE_TYPE"
PREDICATE_NODE = "aws.amazon.com/predicate-node"

#: The settings ``xpushare_vendor`` loaded in this process (hooks given no spec).
_loaded = NeuronConfig()


def _config(ctx: NodeContext) -> NeuronConfig:
    return settings.cached(NeuronConfig, VENDOR, ctx.config)


@hookimpl
def xpushare_vendor() -> VendorSpec:
    global _loaded
    raw = settings.load_settings(VENDOR)
    _loaded = settings.parse(NeuronConfig, VENDOR, raw)
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name="AWS Neuron (Inferentia, Trainium)",
        resource_names=_loaded.names(),
        config=raw,
    )


# --- node side: the vendor's thread -----------------------------------------------------------


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    detect.check_present(_config(ctx))


@hookimpl
def xpushare_detect(ctx: NodeContext) -> list[Device]:
    return detect.detect(_config(ctx), ctx.node_name)


@hookimpl
def xpushare_monitor(ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot:
    return monitor.sample(_config(ctx), devices)


@hookimpl
def xpushare_check_health(ctx: NodeContext, devices: Sequence[Device]) -> list[HealthEvent]:
    # sysfs has no event to wait on: each call polls once and returns at once.
    return health.check(_config(ctx), devices)


@hookimpl
def xpushare_allocate(ctx: NodeContext, request: AllocateRequest) -> ContainerAllocation:
    return allocate.allocate(_config(ctx), request)


# --- scheduler side: pure -----------------------------------------------------------------------


@hookimpl(wrapper=True)
def xpushare_resource_request(
    vendor: VendorSpec, pod: PodView, container: ContainerView
) -> Generator[None, ContainerRequest | None, ContainerRequest | None]:
    parsed = yield
    return rules.adjust(parsed, vendor, pod, container)


@hookimpl
def xpushare_fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
) -> FitResult:
    return fitting.fit(request, node, usage, device_order)


@hookimpl
def xpushare_patch_annotations(assignment: PodAssignment) -> dict[str, str] | None:
    """HAMi's keys: the device indices given, or the core ids for core requests."""
    ours = [c for c in assignment.containers if c.vendor == VENDOR and c.devices]
    if not ours:
        return None
    per = _loaded.cores_per_device
    ids: list[int] = []
    by_core = False
    for c in ours:
        for s in c.devices:
            mask = cores.mask_of(s.partition)
            if mask is None:
                ids.append(s.index)
            else:
                by_core = True
                ids += cores.core_ids(s.index, per, mask)
    out = {
        ASSIGNED_IDS: ",".join(map(str, ids)),
        ALLOCATED: "false",
        PREDICATE_NODE: assignment.node,
    }
    if by_core:
        out[RESOURCE_TYPE] = _loaded.core_resource
    return out

"""The Ascend vendor's hook implementations: thin calls into the modules that do the work.

Node-side hooks run on the vendor's library thread (the host guarantees it), where
``xpushare_startup`` loads and initialises DCMI once and keeps it in ``ctx.state``.
Scheduler-side hooks are pure and read the configuration from the vendor spec, or, for the
hooks whose arguments carry no spec, from the settings this process loaded in
``xpushare_vendor``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xpushare import API_VERSION, AdmissionDenied, VendorUnavailable, hookimpl
from xpushare.models import (
    AllocateRequest,
    ContainerAllocation,
    ContainerRequest,
    ContainerView,
    Device,
    DeviceUsage,
    FitResult,
    HealthEvent,
    JsonPatchOp,
    MonitorSnapshot,
    NodeView,
    PodAssignment,
    PodView,
    VendorSpec,
)
from xpushare.native import LibraryNotFound, NodeContext
from xpushare_ascend import allocate as allocate_mod
from xpushare_ascend import config as config_mod
from xpushare_ascend import detect as detect_mod
from xpushare_ascend import fit as fit_mod
from xpushare_ascend import health, monitor
from xpushare_ascend import request as request_mod
from xpushare_ascend.library import DLOPEN_MODE, Dcmi, DcmiInitError, library_candidates

VENDOR = config_mod.VENDOR
#: Pod annotation listing the vNPU template each container got, for people (kubectl).
TEMPLATES_ANNOTATION = "ascend.xpushare.io/vnpu-templates"


class _Loaded:
    """The settings ``xpushare_vendor`` loaded in this process, for hooks given no spec."""

    config: config_mod.AscendConfig = config_mod.AscendConfig()


@hookimpl
def xpushare_vendor() -> VendorSpec:
    config = config_mod.parse(config_mod.load_file())
    _Loaded.config = config
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name="Huawei Ascend NPU (DCMI)",
        resource_names=config.names(),
        memory_unit_mib=config.memory_factor,
        config=config.model_dump(mode="json"),
        # Asked for every container: one that names another chip family's resource
        # (huawei.com/Ascend310P, ...) is refused with what to ask instead (request.py).
        request_resources=None,
    )


# --- node side: the vendor's library thread ------------------------------------------------


def _dcmi(ctx: NodeContext) -> Dcmi:
    dcmi: Dcmi = ctx.state["dcmi"]
    return dcmi


def _config(ctx: NodeContext) -> config_mod.AscendConfig:
    config: config_mod.AscendConfig = ctx.state["config"]
    return config


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    config = config_mod.parse(ctx.config)
    candidates = library_candidates(config)
    try:
        lib = ctx.load_library(candidates, mode=DLOPEN_MODE)
    except LibraryNotFound as exc:
        # dlerror's message usually starts with the path itself: say it once.
        tried = "; ".join(f"{a.path}: {a.error.removeprefix(a.path + ': ')}" for a in exc.attempts)
        raise VendorUnavailable(
            VENDOR,
            f"Ascend DCMI library (libdcmi.so) not found; tried {tried}. Install the Ascend "
            "driver on this node, or set the ascend vendor's library_path, ascend_home or "
            "host_root to where the host's driver is mounted",
        ) from exc
    try:
        dcmi = Dcmi.open(lib)
    except DcmiInitError as exc:
        raise VendorUnavailable(VENDOR, f"{exc} (library {lib.path})") from exc
    ctx.state["config"] = config
    ctx.state["dcmi"] = dcmi


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    # DCMI exports no shutdown (gpustack-devices.md §5.4); dropping our references is all.
    ctx.state.clear()


@hookimpl
def xpushare_detect(ctx: NodeContext) -> list[Device]:
    return detect_mod.detect(_dcmi(ctx), _config(ctx))


@hookimpl
def xpushare_monitor(ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot:
    return monitor.sample(_dcmi(ctx), devices)


@hookimpl
def xpushare_check_health(ctx: NodeContext, devices: Sequence[Device]) -> list[HealthEvent]:
    # DCMI has no event wait: each call polls once and returns at once.
    return health.changes(_dcmi(ctx), devices)


@hookimpl
def xpushare_allocate(ctx: NodeContext, request: AllocateRequest) -> ContainerAllocation:
    return allocate_mod.allocate(_config(ctx), request)


# --- scheduler side: pure ------------------------------------------------------------------


@hookimpl
def xpushare_resource_request(
    vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    return request_mod.parse(config_mod.cached(vendor.config), vendor.name, pod, container)


@hookimpl
def xpushare_fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
) -> FitResult:
    return fit_mod.fit(request, node, usage, device_order)


@hookimpl
def xpushare_mutate_admission(
    pod: PodView, container: ContainerView, index: int, request: ContainerRequest
) -> list[JsonPatchOp]:
    return admission_patches(_Loaded.config, pod, container, index, request)


@hookimpl
def xpushare_patch_annotations(pod: PodView, assignment: PodAssignment) -> dict[str, str] | None:
    templates = {
        c.container: d.partition
        for c in assignment.containers
        if c.vendor == VENDOR
        for d in c.devices
        if d.partition
    }
    if not templates:
        return None
    return {TEMPLATES_ANNOTATION: ",".join(f"{k}={v}" for k, v in sorted(templates.items()))}


def admission_patches(
    config: config_mod.AscendConfig,
    pod: PodView,
    container: ContainerView,
    index: int,
    req: ContainerRequest,
) -> list[JsonPatchOp]:
    """Write the rounded template size into the pod, and the runtime class if configured.

    :raises AdmissionDenied: a vNPU is asked but the nodes cannot cut one.
    """
    names = config.names()
    if req.partition and not config.vnpu:
        raise AdmissionDenied(
            f"container {container.name!r} of pod {pod.ref} asks for part of an Ascend NPU "
            f"({names.memory}), which needs Ascend Docker Runtime on the nodes; this cluster's "
            "ascend config says vnpu: false. Ask for whole NPUs, or enable vNPUs"
        )
    patches: list[JsonPatchOp] = []
    base = f"/spec/{'initContainers' if container.init else 'containers'}/{index}/resources"
    if req.partition and names.memory:
        wanted = str(-(-(req.memory_mib or 0) // config.memory_factor))
        for field, values in (("limits", container.limits), ("requests", container.requests)):
            if names.memory in values and values[names.memory].strip() != wanted:
                path = f"{base}/{field}/{request_mod.escape(names.memory)}"
                patches.append(JsonPatchOp(op="replace", path=path, value=wanted))
    if config.runtime_class_name and _first_ascend_container(pod, names.all()) == (
        container.init,
        container.name,
    ):
        patches.append(
            JsonPatchOp(op="add", path="/spec/runtimeClassName", value=config.runtime_class_name)
        )
    return patches


def _first_ascend_container(pod: PodView, names: Sequence[str]) -> tuple[bool, str] | None:
    # The runtime class is one pod field: only one container's patch may write it.
    ordered = [c for c in pod.containers if c.init] + [c for c in pod.containers if not c.init]
    for c in ordered:
        if any(n in c.limits or n in c.requests for n in names):
            return c.init, c.name
    return None

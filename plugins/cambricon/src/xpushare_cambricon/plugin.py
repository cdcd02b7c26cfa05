"""The Cambricon vendor's hook implementations: thin calls into the modules that do the work.

Node-side hooks run on the vendor's library thread (the host guarantees it), where
``xpushare_startup`` loads and initialises CNDev once and keeps it in ``ctx.state``.
Scheduler-side hooks are pure; request parsing wraps the core's parser, and the fit reads
the memory unit from the settings this process loaded in ``xpushare_vendor``.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence

from xpushare import API_VERSION, VendorUnavailable, hookimpl
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
    ReleaseRequest,
    VendorSpec,
)
from xpushare.native import LibraryNotFound, NodeContext
from xpushare_cambricon import allocate as allocate_mod
from xpushare_cambricon import config as config_mod
from xpushare_cambricon import detect as detect_mod
from xpushare_cambricon import fit as fit_mod
from xpushare_cambricon import health, monitor
from xpushare_cambricon import request as request_mod
from xpushare_cambricon.library import DLOPEN_MODE, Cndev, CndevInitError, library_candidates

VENDOR = config_mod.VENDOR


class _Loaded:
    """The settings ``xpushare_vendor`` loaded in this process, for hooks given no spec."""

    config: config_mod.CambriconConfig = config_mod.CambriconConfig()


@hookimpl
def xpushare_vendor() -> VendorSpec:
    config = config_mod.parse(config_mod.load_file())
    _Loaded.config = config
    return VendorSpec(
        name=VENDOR,
        api_version=API_VERSION,
        display_name="Cambricon MLU (CNDev)",
        resource_names=config.resource_names,
        memory_unit_mib=config.memory_unit_mib,
        config=config.model_dump(mode="json"),
    )


# --- node side: the vendor's library thread ------------------------------------------------


def _cndev(ctx: NodeContext) -> Cndev:
    cndev: Cndev = ctx.state["cndev"]
    return cndev


def _config(ctx: NodeContext) -> config_mod.CambriconConfig:
    config: config_mod.CambriconConfig = ctx.state["config"]
    return config


@hookimpl
def xpushare_startup(ctx: NodeContext) -> None:
    config = config_mod.parse(ctx.config)
    try:
        lib = ctx.load_library(library_candidates(config), mode=DLOPEN_MODE)
    except LibraryNotFound as exc:
        # dlerror's message usually starts with the path itself: say it once.
        tried = "; ".join(f"{a.path}: {a.error.removeprefix(a.path + ': ')}" for a in exc.attempts)
        raise VendorUnavailable(
            VENDOR,
            f"Cambricon CNDev library (libcndev.so) not found; tried {tried}. Install the "
            "Cambricon driver (neuware) on this node, or set the cambricon vendor's "
            "library_path, neuware_home or host_root to where the host's driver is mounted",
        ) from exc
    try:
        cndev = Cndev.open(lib)
    except CndevInitError as exc:
        raise VendorUnavailable(VENDOR, f"{exc} (library {lib.path})") from exc
    ctx.state["config"] = config
    ctx.state["cndev"] = cndev


@hookimpl
def xpushare_shutdown(ctx: NodeContext) -> None:
    cndev: Cndev | None = ctx.state.pop("cndev", None)
    if cndev is not None:
        cndev.close()
    ctx.state.clear()


@hookimpl
def xpushare_detect(ctx: NodeContext) -> list[Device]:
    return detect_mod.detect(_cndev(ctx), _config(ctx))


@hookimpl
def xpushare_monitor(ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot:
    return monitor.sample(_cndev(ctx), devices)


@hookimpl
def xpushare_check_health(ctx: NodeContext, devices: Sequence[Device]) -> list[HealthEvent]:
    # CNDev has no event wait: each call polls once and returns at once.
    return health.changes(_cndev(ctx), devices)


@hookimpl
def xpushare_allocate(ctx: NodeContext, request: AllocateRequest) -> ContainerAllocation:
    return allocate_mod.allocate(_config(ctx), _cndev(ctx), request)


@hookimpl
def xpushare_release(ctx: NodeContext, request: ReleaseRequest) -> None:
    # Only sMLU shares create anything; whole cards and env-mode splits have nothing to free.
    if _config(ctx).share_mode == "smlu":
        allocate_mod.release(_cndev(ctx), request)


# --- scheduler side: pure ------------------------------------------------------------------


@hookimpl(wrapper=True)
def xpushare_resource_request(
    vendor: VendorSpec, pod: PodView, container: ContainerView
) -> Generator[None, ContainerRequest | None, ContainerRequest | None]:
    parsed = yield
    return request_mod.adjust(config_mod.cached(vendor.config), vendor, pod, container, parsed)


@hookimpl
def xpushare_fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
) -> FitResult:
    return fit_mod.fit(request, node, usage, device_order, _Loaded.config.memory_unit_mib)

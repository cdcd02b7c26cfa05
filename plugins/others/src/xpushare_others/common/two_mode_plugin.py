"""The hooks a vendor served by two entry points (two modes) has in common.

Why one class for both of a vendor's entry points: Enflame (whole GCUs, DRS partitions) and
Kunlun (whole XPUs, vXPU slices) drive one library and one kind of hardware in two ways that
differ only in their resource names, request rules and which ``mode`` a node serves. Each
entry point is an instance of the vendor's subclass of :class:`TwoModePlugin`; the instance
on a node whose ``mode`` is the other one is inactive there, with that reason. The node-side
hooks are the same calls into each vendor's modules, named by its :class:`TwoModeVendor`;
the scheduler-side hooks that differ (fit, score, admission, annotations) are the subclass's.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from xpushare import API_VERSION, VendorUnavailable, hookimpl
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
from xpushare_others.common import settings


class _Library(Protocol):
    def shutdown(self) -> None: ...


C = TypeVar("C", bound=settings.TwoModeVendorConfig)
L = TypeVar("L", bound=_Library)


@dataclass(frozen=True)
class TwoModeVendor(Generic[C, L]):
    """One vendor's two modes, its settings and the functions its hooks call."""

    #: The settings' vendor name (``XPUSHARE_<SECTION>_CONFIG``), also the first entry point.
    section: str
    #: The vendor as messages name it: ``"Enflame"``.
    label: str
    #: Each mode's entry-point (vendor) name and display name.
    vendors: Mapping[str, str]
    display_names: Mapping[str, str]
    config_type: type[C]
    #: Which mode an entry point serves.
    mode_of: Callable[[str], str]
    #: The library: opened on the vendor thread, kept in ``ctx.state`` under *state_key*.
    open_library: Callable[[NodeContext, C], object]
    state_key: str
    library_type: type[L]
    library_state: Callable[[NodeContext], L]
    detect: Callable[[L, C, str, str], list[Device]]
    sample: Callable[[L, Sequence[Device]], MonitorSnapshot]
    check_health: Callable[[L, Sequence[Device]], list[HealthEvent]]
    allocate: Callable[[C, str, AllocateRequest], ContainerAllocation]
    adjust_request: Callable[
        [ContainerRequest | None, VendorSpec, PodView, ContainerView], ContainerRequest | None
    ]


class TwoModePlugin(Generic[C, L]):
    """The hooks of one of a two-mode vendor's entry points (*vendor* is its name)."""

    def __init__(self, kind: TwoModeVendor[C, L], vendor: str) -> None:
        self.kind = kind
        self.vendor = vendor
        self.mode = kind.mode_of(vendor)
        #: The settings ``xpushare_vendor`` loaded in this process (hooks given no spec).
        self.loaded: C = kind.config_type()

    def _config(self, ctx: NodeContext) -> C:
        return settings.cached(self.kind.config_type, self.kind.section, ctx.config)

    @hookimpl
    def xpushare_vendor(self) -> VendorSpec:
        raw = settings.load_settings(self.kind.section)
        config = settings.parse(self.kind.config_type, self.kind.section, raw)
        self.loaded = config
        return VendorSpec(
            name=self.vendor,
            api_version=API_VERSION,
            display_name=self.kind.display_names[self.mode],
            resource_names=config.names(self.vendor),
            config=raw,
        )

    # --- node side: the vendor's library thread -------------------------------------------

    @hookimpl
    def xpushare_startup(self, ctx: NodeContext) -> None:
        config = self._config(ctx)
        if config.mode != self.mode:
            # Short cause and action first: `xpushare detect` shows "cause: action" in 80
            # columns, the rest with --verbose.
            raise VendorUnavailable(
                self.vendor,
                f"mode is {config.mode!r} here (vendor {self.kind.vendors[config.mode]}); "
                f"set mode: {self.mode} to serve {self.kind.label} as this one instead, in "
                f"XPUSHARE_{self.kind.section.upper()}_CONFIG or the node agent's "
                f"{self.vendor!r} section",
            )
        self.kind.open_library(ctx, config)

    @hookimpl
    def xpushare_shutdown(self, ctx: NodeContext) -> None:
        library = ctx.state.pop(self.kind.state_key, None)
        if isinstance(library, self.kind.library_type):
            library.shutdown()

    @hookimpl
    def xpushare_detect(self, ctx: NodeContext) -> list[Device]:
        state = self.kind.library_state(ctx)
        return self.kind.detect(state, self._config(ctx), self.vendor, ctx.node_name)

    @hookimpl
    def xpushare_monitor(self, ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot:
        return self.kind.sample(self.kind.library_state(ctx), devices)

    @hookimpl
    def xpushare_check_health(
        self, ctx: NodeContext, devices: Sequence[Device]
    ) -> list[HealthEvent]:
        return self.kind.check_health(self.kind.library_state(ctx), devices)

    @hookimpl
    def xpushare_allocate(self, ctx: NodeContext, request: AllocateRequest) -> ContainerAllocation:
        return self.kind.allocate(self._config(ctx), self.vendor, request)

    # --- scheduler side: pure --------------------------------------------------------------

    @hookimpl(wrapper=True)
    def xpushare_resource_request(
        self, vendor: VendorSpec, pod: PodView, container: ContainerView
    ) -> Generator[None, ContainerRequest | None, ContainerRequest | None]:
        parsed = yield
        return self.kind.adjust_request(parsed, vendor, pod, container)

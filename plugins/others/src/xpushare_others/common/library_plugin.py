"""The hooks every single-entry-point vendor of xpushare-others has, as one class.

Why a class: Biren, Hygon, Iluvatar, MetaX, Moore Threads, T-Head and Vastai each load one
management library on the vendor thread and answer the node-side hooks with the same calls
into their own modules (``library``, ``detect``, ``monitor``, ``health``, ``allocate``);
only the modules and a few scheduler-side rules differ. A vendor names its modules (and its
request rules) in a :class:`LibraryVendor`; its entry point is a :class:`LibraryVendorPlugin`,
or a :class:`RulesVendorPlugin` where it has request rules, or a subclass of either that
adds its own hooks (fit, admission, release). Two-mode vendors (Enflame, Kunlun) have
:mod:`~xpushare_others.common.two_mode_plugin` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

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
    ResourceNames,
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_others.common import settings, slots

C = TypeVar("C", bound=settings.VendorConfig)
L = TypeVar("L")


@dataclass(frozen=True)
class LibraryVendor(Generic[C, L]):
    """One vendor: its name, settings, and the functions of its modules its hooks call."""

    #: The entry point's name, also the settings' (``XPUSHARE_<NAME>_CONFIG``).
    name: str
    config_type: type[C]
    #: What ``xpushare plugins`` shows, from the settings (e.g. the mode a node serves).
    display_name: Callable[[C], str]
    names: Callable[[C], ResourceNames]
    #: The library: opened on the vendor thread and kept in ``ctx.state`` until closed.
    open_library: Callable[[NodeContext, C], object]
    close_library: Callable[[NodeContext], None]
    library_state: Callable[[NodeContext], L]
    detect: Callable[[L, C], list[Device]]
    sample: Callable[[L, Sequence[Device]], MonitorSnapshot]
    check_health: Callable[[L, Sequence[Device]], list[HealthEvent]]
    allocate: Callable[[C, AllocateRequest], ContainerAllocation]
    #: MiB in one unit of the memory resource (HAMi's units: 256 MiB for Iluvatar, ...).
    memory_unit_mib: Callable[[C], int] | None = None
    #: What the compute resource calls a whole device (``VendorSpec.compute_total``).
    compute_total: int = 100
    #: The vendor's rules on top of the core's request parser (None: the core's as it is).
    adjust_request: (
        Callable[
            [ContainerRequest | None, VendorSpec, PodView, ContainerView], ContainerRequest | None
        ]
        | None
    ) = None


def slot_request(
    parsed: ContainerRequest | None, vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    """One share slot of each device and nothing else booked (HAMi's Biren and Vastai
    backends): :func:`~xpushare_others.common.slots.slot_request`."""
    return slots.slot_request(parsed, pod)


class LibraryVendorPlugin(Generic[C, L]):
    """The common hooks of one vendor (*kind*); subclasses add the vendor's own."""

    def __init__(self, kind: LibraryVendor[C, L]) -> None:
        self.kind = kind
        #: The settings ``xpushare_vendor`` loaded in this process (for pure hooks).
        self.loaded: C = kind.config_type()

    def config(self, ctx: NodeContext) -> C:
        return settings.cached(self.kind.config_type, self.kind.name, ctx.config)

    @hookimpl
    def xpushare_vendor(self) -> VendorSpec:
        raw = settings.load_settings(self.kind.name)
        config = settings.parse(self.kind.config_type, self.kind.name, raw)
        self.loaded = config
        unit = self.kind.memory_unit_mib
        return VendorSpec(
            name=self.kind.name,
            api_version=API_VERSION,
            display_name=self.kind.display_name(config),
            resource_names=self.kind.names(config),
            config=raw,
            **({"memory_unit_mib": unit(config)} if unit is not None else {}),
            compute_total=self.kind.compute_total,
        )

    # --- node side: the vendor's library thread -------------------------------------------

    @hookimpl
    def xpushare_startup(self, ctx: NodeContext) -> None:
        self.kind.open_library(ctx, self.config(ctx))

    @hookimpl
    def xpushare_shutdown(self, ctx: NodeContext) -> None:
        self.kind.close_library(ctx)

    @hookimpl
    def xpushare_detect(self, ctx: NodeContext) -> list[Device]:
        return self.kind.detect(self.kind.library_state(ctx), self.config(ctx))

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
        return self.kind.allocate(self.config(ctx), request)


class RulesVendorPlugin(LibraryVendorPlugin[C, L]):
    """A vendor with its own request rules (``LibraryVendor.adjust_request``) on top of the
    core's parser. Why a subclass: a vendor without rules keeps the core's parser alone,
    which the plugin host calls directly (no hook wrapper in the way)."""

    @hookimpl(wrapper=True)
    def xpushare_resource_request(
        self, vendor: VendorSpec, pod: PodView, container: ContainerView
    ) -> Generator[None, ContainerRequest | None, ContainerRequest | None]:
        parsed = yield
        adjust = self.kind.adjust_request
        return parsed if adjust is None else adjust(parsed, vendor, pod, container)

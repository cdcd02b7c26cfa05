"""The T-Head vendor plugin (entry point ``xpushare_others.thead.plugin:thead``).

Requests and fit are the core's on PPUs not in MIG mode: memory in MiB or percent, compute in
percent, shared by ``share_slots`` containers per PPU (GPUStack's sliced form, one slice per
container). PPUs in MIG mode have their own fit (:mod:`.fit`), instances cut at Allocate and
destroyed by the release hook (:mod:`.instances`), and a pod may name the profile it wants
with the annotation ``xpushare.io/mig-profile`` (NVIDIA's key; T-Head's ``4g48gb`` spelling
is read as ``4g.48gb``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from xpushare import hookimpl
from xpushare.models import (
    AllocateRequest,
    ContainerAllocation,
    ContainerRequest,
    ContainerView,
    Device,
    DeviceUsage,
    FitResult,
    NodeView,
    PodView,
    ReleaseRequest,
    VendorSpec,
)
from xpushare.native import NodeContext
from xpushare_others.common.library_plugin import LibraryVendor, RulesVendorPlugin
from xpushare_others.thead import allocate, detect, health, instances, library, mig, monitor
from xpushare_others.thead import fit as fitting
from xpushare_others.thead.config import VENDOR, TheadConfig

#: The pod annotation naming the MIG profile its containers get (NVIDIA's, the same key).
PROFILE_KEY: Final = "xpushare.io/mig-profile"


def adjust(
    request: ContainerRequest | None, vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    """A pod's MIG profile, named by ``xpushare.io/mig-profile``, into ``partition``."""
    raw = pod.annotations.get(PROFILE_KEY)
    if request is None or raw is None:
        return request
    profile = mig.normalise(raw[:80])
    if profile is None:
        raise ValueError(
            f"pod {pod.ref}: annotation {PROFILE_KEY}={raw[:40]!r} is not a MIG profile name "
            "(e.g. 4g.48gb, as `ppu-smi mig -lgip` lists it)"
        )
    return request.model_copy(update={"partition": profile})


THEAD: LibraryVendor[TheadConfig, library.Hgml] = LibraryVendor(
    name=VENDOR,
    config_type=TheadConfig,
    display_name=lambda _: "T-Head PPU",
    names=TheadConfig.names,
    open_library=library.open_hgml,
    close_library=library.close_hgml,
    library_state=library.state,
    detect=detect.detect,
    sample=monitor.sample,
    check_health=health.check,
    allocate=allocate.allocate_shared,
    adjust_request=adjust,
)


class TheadPlugin(RulesVendorPlugin[TheadConfig, library.Hgml]):
    """T-Head's hooks: the common ones, and MIG's fit, Allocate and release."""

    @hookimpl
    def xpushare_allocate(self, ctx: NodeContext, request: AllocateRequest) -> ContainerAllocation:
        return allocate.allocate(library.state(ctx), self.config(ctx), request)

    @hookimpl
    def xpushare_release(self, ctx: NodeContext, request: ReleaseRequest) -> None:
        hgml = ctx.state.get(library.STATE_KEY)
        instances.release(
            hgml if isinstance(hgml, library.Hgml) else None, self.config(ctx), request
        )

    @hookimpl
    def xpushare_fit(
        self,
        request: ContainerRequest,
        node: NodeView,
        usage: Mapping[str, DeviceUsage],
        device_order: Sequence[str],
        memory_overcommit: float,
    ) -> FitResult | None:
        return fitting.fit(request, node, usage, device_order, memory_overcommit)

    @hookimpl
    def xpushare_fit_applies(self, devices: Sequence[Device]) -> bool | None:
        return fitting.applies(devices)


thead = TheadPlugin(THEAD)

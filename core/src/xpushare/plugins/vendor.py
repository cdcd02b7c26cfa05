"""One vendor as the rest of xpushare sees it: typed calls, each through that vendor's own caller.

Why a handle per vendor: pluggy stops a call at the first exception, so a broadcast would let
one vendor's bug stop every other vendor. Each handle calls its hooks through a pluggy subset
caller that holds only this vendor's plugin, the extension plugins and the core's defaults;
validates what comes back (a third-party plugin is untrusted input); turns every failure into
a :class:`~xpushare.errors.PluginError` naming the vendor and the hook; and runs node-side
hooks on the vendor's own library thread (DESIGN.md §4).
"""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from xpushare.errors import AdmissionDenied, PluginError, VendorUnavailable
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
    JsonPatchOp,
    MonitorSnapshot,
    NodeView,
    PodAssignment,
    PodView,
    ReleaseRequest,
    VendorSpec,
)
from xpushare.models.request import MAX_DEVICE_COUNT, MAX_DEVICE_MEMORY_MIB
from xpushare.native import LibraryThread, NativeError, NodeContext
from xpushare.plugins import validation
from xpushare.scheduling.quantity import (
    MIB,
    has_unit,
    may_be_canonical_integer,
    parse_quantity,
    shown,
)

if TYPE_CHECKING:
    import pluggy

    from xpushare.plugins.records import PluginRecord

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds a node-side hook may run on the vendor thread before the call is abandoned. Ten
#: seconds is far above a healthy NVML/ROCm enumeration (tens of ms per device, see
#: research/perf-reliability.md) and below kubelet's patience for a plugin's first answer.
DEFAULT_NODE_TIMEOUT_S = 10.0

#: Allocate's own deadline: kubelet calls Allocate with no timeout inside pod admission
#: (DESIGN.md §6), so we answer with an error rather than hold kubelet up.
ALLOCATE_TIMEOUT_S = 5.0

# Errors that are the user's or the environment's, not a plugin bug: passed through as-is.
_PASS_THROUGH: tuple[type[BaseException], ...] = (VendorUnavailable, AdmissionDenied, NativeError)


class VendorHandle:
    """Typed access to one loaded vendor plugin."""

    def __init__(
        self,
        *,
        pm: pluggy.PluginManager,
        plugin: object,
        record: PluginRecord,
        spec: VendorSpec,
        node_name: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = spec.name
        self.spec = spec
        self.record = record
        self._pm = pm
        self._plugin = plugin
        self._callers: dict[str, Any] = {}
        self._own_callers: dict[str, Any] = {}
        self._others: list[object] = []
        self._core_defaults: object | None = None
        self._fast: dict[str, Callable[..., Any]] = {}
        self._node_name = node_name or socket.gethostname()
        self._config = {**spec.config, **(config or {})}
        self._context: NodeContext | None = None
        self._started = False
        #: What a container must name for this vendor to be asked about it (``None``: ask
        #: for every container). Why: a pod is parsed by every installed vendor's hook, up
        #: to 17 with every wheel (about 10 µs each through pluggy), and most containers
        #: name one vendor's resources at most (hookspecs.xpushare_resource_request).
        extra = spec.request_resources
        self._request_keys: frozenset[str] | None = (
            None if extra is None else frozenset((*spec.resource_names.all(), *extra))
        )

    # -- wiring ---------------------------------------------------------------------------

    def rewire(self, other_vendor_plugins: Sequence[object], core_defaults: object | None) -> None:
        """Rebuild the subset callers after the set of loaded vendors changed."""
        self._others = [p for p in other_vendor_plugins if p is not self._plugin]
        self._core_defaults = core_defaults
        self._callers.clear()
        self._own_callers.clear()
        self._fast.clear()
        # Fast path: when only the core's default answers a scheduler-side hook (no vendor
        # impl, no extension, no tracing), call it directly: /filter calls fit per node.
        for hook in ("xpushare_fit", "xpushare_resource_request"):
            impls = self._caller(hook).get_hookimpls()
            if len(impls) == 1 and impls[0].plugin is core_defaults and not self._pm_traced():
                self._fast[hook] = impls[0].function

    def _pm_traced(self) -> bool:
        return bool(getattr(self._pm, "xpushare_traced", False))

    def _caller(self, hook: str) -> Any:
        caller = self._callers.get(hook)
        if caller is None:
            caller = self._pm.subset_hook_caller(hook, remove_plugins=self._others)
            self._callers[hook] = caller
        return caller

    def _own_caller(self, hook: str) -> Any:
        """A caller without the core's defaults: the vendor (and extensions) only."""
        caller = self._own_callers.get(hook)
        if caller is None:
            removed = [*self._others, *([self._core_defaults] if self._core_defaults else [])]
            caller = self._pm.subset_hook_caller(hook, remove_plugins=removed)
            self._own_callers[hook] = caller
        return caller

    def implements(self, hook: str) -> bool:
        """Whether this vendor's own plugin implements *hook* (core defaults don't count)."""
        return any(i.plugin is self._plugin for i in self._caller(hook).get_hookimpls())

    def _call(self, hook: str, **kwargs: Any) -> Any:
        try:
            return self._caller(hook)(**kwargs)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            raise PluginError(self.name, f"{hook} raised {type(exc).__name__}: {exc}") from exc

    def _checked(self, hook: str, check: Callable[[], T]) -> T:
        try:
            return check()
        except ValueError as exc:
            raise PluginError(self.name, f"{hook} returned an invalid result: {exc}") from exc

    # -- scheduler side (pure, caller's thread) -------------------------------------------

    def resource_request(
        self, *, pod: PodView, container: ContainerView
    ) -> ContainerRequest | None:
        keys = self._request_keys
        if (
            keys is not None
            and keys.isdisjoint(container.limits)
            and keys.isdisjoint(container.requests)
        ):
            return None
        fast = self._fast.get("xpushare_resource_request")
        if fast is not None:
            # The core's own parser: trusted, and its ValueError is the user's mistake.
            result: ContainerRequest | None = fast(vendor=self.spec, pod=pod, container=container)
            return self._bounded(result, pod, container)
        try:
            raw = self._caller("xpushare_resource_request")(
                vendor=self.spec, pod=pod, container=container
            )
        except ValueError:
            raise  # an invalid request, explained for the user
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            raise PluginError(
                self.name, f"xpushare_resource_request raised {type(exc).__name__}: {exc}"
            ) from exc
        if raw is None:
            return None
        checked = self._checked(
            "xpushare_resource_request", lambda: validation.request(self.name, raw)
        )
        return self._bounded(checked, pod, container)

    def _bounded(
        self, request: ContainerRequest | None, pod: PodView, container: ContainerView
    ) -> ContainerRequest | None:
        """*request*, refused (``ValueError``) beyond what a device or a node can hold.

        Checked here, after every vendor's parsing and wrappers, because a wrapper may give a
        value its own meaning (MetaX reads ``4Gi`` as bytes): only the final request says
        what a container asks of one device. Nothing larger reaches the shared state.
        """
        if request is None:
            return None
        names = self.spec.resource_names
        kind = "init container" if container.init else "container"
        who = f"pod {pod.ref}, {kind} {container.name!r}"
        if request.count > MAX_DEVICE_COUNT:
            raise ValueError(
                f"{who}: {names.count} asks for {request.count:,} {self.name} devices, more "
                f"than any node has; ask for at most {MAX_DEVICE_COUNT}"
            )
        if request.memory_mib is not None:
            self._no_unit_suffix(request.memory_mib, container, who)
        if request.memory_mib is not None and request.memory_mib > MAX_DEVICE_MEMORY_MIB:
            raise ValueError(
                f"{who}: {names.memory or 'memory'} asks for {request.memory_mib:,} MiB per "
                f"{self.name} device, more than any device has (at most "
                f"{MAX_DEVICE_MEMORY_MIB:,} MiB, 16 TiB); ask for at most that"
            )
        return request

    def _no_unit_suffix(self, memory_mib: int, container: ContainerView, who: str) -> None:
        """Refuse a memory value with a unit (``16Gi``) that was read as a count of units.

        The memory resource counts MiB (or the vendor's units) as a plain number, as in HAMi;
        the core's parser multiplies by the suffix (``16Gi`` is 17,179,869,184 MiB), so such
        a value is refused with what the user most likely meant: the quantity read as bytes,
        the Kubernetes meaning of a memory suffix. A vendor whose wrapper gives the suffix
        that meaning itself (MetaX, Kunlun) returns another figure and is left alone.
        """
        name = self.spec.resource_names.memory
        if name is None:
            return
        raw = container.limits.get(name)
        if raw is None:
            raw = container.requests.get(name)
        if raw is None or not has_unit(raw):
            return
        if may_be_canonical_integer(raw) and memory_mib <= MAX_DEVICE_MEMORY_MIB:
            # kube-apiserver stores and sends `nvidia.com/gpumem: 8000` as "8k": a plain
            # number, read as one (HAMi reads it so); a value too large to be one (a user's
            # "16G") still gets the advice below.
            return
        try:
            value = parse_quantity(raw)
        except ValueError:
            return  # the parser refused it already, or a wrapper read it its own way
        unit = self.spec.memory_unit_mib
        if value == 0 or memory_mib != value * unit:
            return  # zero in any unit, or a wrapper gave the suffix its own meaning
        units = math.ceil(value / (MIB * unit))
        counted = "MiB" if unit == 1 else f"units of {unit} MiB"
        meant = f"{units} MiB" if unit == 1 else f"{units} units ({units * unit} MiB)"
        raise ValueError(
            f"{who}: {name} counts {counted} as a plain number, without a unit; "
            f"{shown(raw)} read as bytes is {meant}: write {name}: {units}"
        )

    def fit(
        self,
        *,
        request: ContainerRequest,
        node: NodeView,
        usage: Mapping[str, DeviceUsage],
        device_order: Sequence[str],
        memory_overcommit: float = 1.0,
    ) -> FitResult:
        kwargs = {
            "request": request,
            "node": node,
            "usage": usage,
            "device_order": device_order,
            "memory_overcommit": memory_overcommit,
        }
        fast = self._fast.get("xpushare_fit")
        if fast is not None:
            result: FitResult = fast(**kwargs)
            return result
        raw = self._call("xpushare_fit", **kwargs)
        if raw is None:
            raise PluginError(self.name, "xpushare_fit: no implementation answered")
        return self._checked("xpushare_fit", lambda: validation.fit(raw, request, node))

    def fit_applies(self, devices: Sequence[Device]) -> bool:
        """Whether :meth:`own_fit` may decide anything on a node with *devices* (the
        ``xpushare_fit_applies`` hook; ``True`` without one or when it fails)."""
        if not self.implements("xpushare_fit_applies"):
            return True
        try:
            raw = self._own_caller("xpushare_fit_applies")(devices=devices)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            log.warning(
                "vendor %s: xpushare_fit_applies raised %s: %s; its xpushare_fit is asked on "
                "every node",
                self.name,
                type(exc).__name__,
                exc,
            )
            return True
        if raw is None:
            return True
        if not isinstance(raw, bool):
            log.warning(
                "vendor %s: xpushare_fit_applies returned %s, not a bool; its xpushare_fit is "
                "asked on every node",
                self.name,
                type(raw).__name__,
            )
            return True
        return raw

    def own_fit(
        self,
        *,
        request: ContainerRequest,
        node: NodeView,
        usage: Mapping[str, DeviceUsage],
        device_order: Sequence[str],
        memory_overcommit: float = 1.0,
    ) -> FitResult | None:
        """The vendor's own fit, or ``None`` when it leaves the request to the core default.

        The placement engine calls this instead of :meth:`fit` so that a ``None`` falls
        back to its own prebuilt device tables rather than to the default hook, which
        would rebuild them from the views for every node.
        """
        try:
            raw = self._own_caller("xpushare_fit")(
                request=request,
                node=node,
                usage=usage,
                device_order=device_order,
                memory_overcommit=memory_overcommit,
            )
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            message = f"xpushare_fit raised {type(exc).__name__}: {exc}"
            raise PluginError(self.name, message) from exc
        if raw is None:
            return None
        return self._checked("xpushare_fit", lambda: validation.fit(raw, request, node))

    def score(
        self,
        *,
        request: ContainerRequest,
        node: NodeView,
        fit: FitResult,
        usage: Mapping[str, DeviceUsage],
    ) -> float | None:
        raw = self._call("xpushare_score", request=request, node=node, fit=fit, usage=usage)
        if raw is None:
            return None
        return self._checked("xpushare_score", lambda: validation.score(raw))

    def patch_annotations(
        self, *, pod: PodView, assignment: PodAssignment, taken: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        raw = self._call("xpushare_patch_annotations", pod=pod, assignment=assignment)
        if raw is None:
            return {}
        return self._checked(
            "xpushare_patch_annotations", lambda: validation.annotations(raw, taken)
        )

    def mutate_admission(
        self, *, pod: PodView, container: ContainerView, index: int, request: ContainerRequest
    ) -> tuple[JsonPatchOp, ...]:
        raw = self._call(
            "xpushare_mutate_admission", pod=pod, container=container, index=index, request=request
        )
        if raw is None:
            return ()
        return self._checked("xpushare_mutate_admission", lambda: validation.patches(raw))

    def admission_guard(self) -> AdmissionGuard:
        """What the webhook must refuse for this vendor; empty when the vendor says nothing.

        Given the vendor's configuration, as node-side hooks get it, because the paths it
        declares (HAMi-core's directory) are settings of the vendor.
        """
        raw = self._call("xpushare_admission_guard", vendor=self.spec, config=self._config)
        if raw is None:
            return AdmissionGuard()
        return self._checked("xpushare_admission_guard", lambda: validation.admission_guard(raw))

    # -- node side (the vendor's library thread) ------------------------------------------

    @property
    def context(self) -> NodeContext:
        """The vendor's node context; creating it starts the vendor's library thread."""
        if self._context is None:
            self._context = NodeContext(
                vendor=self.name,
                node_name=self._node_name,
                library=LibraryThread(self.name, default_timeout_s=DEFAULT_NODE_TIMEOUT_S),
                config=self._config,
            )
        return self._context

    def _hook_call(self, hook: str, kwargs: dict[str, Any]) -> Callable[[], Any]:
        ctx = self.context

        def call() -> Any:
            return self._call(hook, ctx=ctx, **kwargs)

        # The library thread names a stuck or timed-out call by its qualified name.
        call.__qualname__ = call.__name__ = f"{self.name}.{hook}"
        return call

    def _on_thread(self, hook: str, timeout_s: float | None, **kwargs: Any) -> Any:
        return self.context.library.call(self._hook_call(hook, kwargs), timeout_s=timeout_s)

    async def _aon_thread(self, hook: str, timeout_s: float | None, **kwargs: Any) -> Any:
        return await self.context.library.acall(self._hook_call(hook, kwargs), timeout_s=timeout_s)

    def startup(self) -> None:
        self._on_thread("xpushare_startup", None)
        self._started = True

    async def astartup(self) -> None:
        await self._aon_thread("xpushare_startup", None)
        self._started = True

    def shutdown(self) -> None:
        """Release the library and stop the vendor thread; errors are logged, never raised.

        The shutdown hook runs only after a successful startup, as its contract says.
        """
        if self._context is None:
            return
        try:
            if self._started:
                self._on_thread("xpushare_shutdown", None)
        except Exception as exc:
            log.warning("vendor %s: shutdown failed: %s", self.name, exc)
        finally:
            self._started = False
            self._context.library.close()
            self._context = None

    def _devices(self, raw: Any) -> tuple[Device, ...]:
        if raw is None:
            raise VendorUnavailable(self.name, "the plugin reported no detection result")
        return self._checked("xpushare_detect", lambda: validation.devices(self.name, raw))

    def detect(self) -> tuple[Device, ...]:
        return self._devices(self._on_thread("xpushare_detect", None))

    async def adetect(self) -> tuple[Device, ...]:
        return self._devices(await self._aon_thread("xpushare_detect", None))

    def _snapshot(self, raw: Any) -> MonitorSnapshot | None:
        if raw is None:
            return None
        return self._checked("xpushare_monitor", lambda: validation.snapshot(raw))

    def monitor(self, devices: Sequence[Device]) -> MonitorSnapshot | None:
        return self._snapshot(self._on_thread("xpushare_monitor", None, devices=devices))

    async def amonitor(self, devices: Sequence[Device]) -> MonitorSnapshot | None:
        return self._snapshot(await self._aon_thread("xpushare_monitor", None, devices=devices))

    def _events(self, raw: Any) -> tuple[HealthEvent, ...] | None:
        if raw is None:
            return None
        return self._checked("xpushare_check_health", lambda: validation.health_events(raw))

    def check_health(
        self, devices: Sequence[Device], wait_s: float
    ) -> tuple[HealthEvent, ...] | None:
        raw = self._on_thread(
            "xpushare_check_health", wait_s + DEFAULT_NODE_TIMEOUT_S, devices=devices, wait_s=wait_s
        )
        return self._events(raw)

    async def acheck_health(
        self, devices: Sequence[Device], wait_s: float
    ) -> tuple[HealthEvent, ...] | None:
        raw = await self._aon_thread(
            "xpushare_check_health", wait_s + DEFAULT_NODE_TIMEOUT_S, devices=devices, wait_s=wait_s
        )
        return self._events(raw)

    def _allocation(self, raw: Any) -> ContainerAllocation:
        if raw is None:
            return ContainerAllocation()
        return self._checked("xpushare_allocate", lambda: validation.allocation(raw))

    def allocate(
        self, request: AllocateRequest, timeout_s: float = ALLOCATE_TIMEOUT_S
    ) -> ContainerAllocation:
        return self._allocation(self._on_thread("xpushare_allocate", timeout_s, request=request))

    async def aallocate(
        self, request: AllocateRequest, timeout_s: float = ALLOCATE_TIMEOUT_S
    ) -> ContainerAllocation:
        raw = await self._aon_thread("xpushare_allocate", timeout_s, request=request)
        return self._allocation(raw)

    def release(self, request: ReleaseRequest, timeout_s: float = DEFAULT_NODE_TIMEOUT_S) -> None:
        """Free what the vendor created for an ended pod (a broadcast: nothing is returned)."""
        self._on_thread("xpushare_release", timeout_s, request=request)

    async def arelease(
        self, request: ReleaseRequest, timeout_s: float = DEFAULT_NODE_TIMEOUT_S
    ) -> None:
        await self._aon_thread("xpushare_release", timeout_s, request=request)

    def _preferred(
        self, raw: Any, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        if raw is None:
            picked = list(must_include)
            picked += [d for d in available if d not in picked][: max(0, size - len(picked))]
            return picked
        return self._checked(
            "xpushare_preferred_allocation",
            lambda: validation.preferred(raw, available, must_include, size),
        )

    def preferred_allocation(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        raw = self._on_thread(
            "xpushare_preferred_allocation",
            None,
            available=available,
            must_include=must_include,
            size=size,
        )
        return self._preferred(raw, available, must_include, size)

    async def apreferred_allocation(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        raw = await self._aon_thread(
            "xpushare_preferred_allocation",
            None,
            available=available,
            must_include=must_include,
            size=size,
        )
        return self._preferred(raw, available, must_include, size)

"""The vendor contract: every hook a vendor plugin (or an extension plugin) may implement.

A plugin is a module (or object) registered under the ``xpushare.vendors`` entry-point group;
the entry-point name is the vendor name. It implements hooks with :data:`xpushare.hookimpl`::

    from xpushare import hookimpl

    @hookimpl
    def xpushare_vendor():
        return VendorSpec(name="acme", api_version=API_VERSION, resource_names=...)

Rules that hold for every hook:

* Hooks are called with keyword arguments; an implementation may accept any subset of the
  arguments of its spec (new arguments can be added without breaking plugins).
* **Per-vendor dispatch.** The host calls each vendor's hooks through a caller that holds
  that vendor's plugin and the core's built-in defaults only, so a vendor sees only its own
  work, and one vendor's exception, hang or bad result never reaches another vendor.
* **Node-side hooks** (startup, shutdown, detect, monitor, check_health, allocate,
  preferred_allocation, release) run in the node agent (``xpushare node``) or the
  ``xpushare detect`` command, on **the vendor's own library thread**: one OS thread per
  vendor for the life of the process, where the vendor's native library is loaded and every
  call into it is made
  (dlerror, errno and most vendor libraries are per-thread or not thread-safe). The host
  applies a timeout to each call; a call past it leaves the vendor marked stuck.
* **Scheduler-side hooks** (resource_request, fit, score, patch_annotations,
  mutate_admission, admission_guard) run in the scheduler process (``xpushare scheduler``)
  or the simulator, on the caller's thread (the asyncio event loop), and must be pure: no
  I/O, no API server, no blocking; they may be called thousands of times a second.
* Results are validated at the boundary against the models in :mod:`xpushare.models`: a
  result of the wrong type or shape is treated as an error of that vendor, named as such.
* For ``firstresult`` hooks, ``None`` means "not handled here, ask the next implementation";
  the core registers ``trylast`` defaults for the hooks that have one, so ``None`` from a
  vendor falls through to the core's behaviour described in each hook.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
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
    from xpushare.native import NodeContext

#: The pluggy project name; also the prefix of every hook.
PROJECT = "xpushare"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --------------------------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------------------------


@hookspec
def xpushare_vendor() -> VendorSpec:
    """Describe the vendor this plugin drives.

    Called once per process by the plugin host, right after the plugin is registered, on the
    thread that loads plugins. The result must be a :class:`~xpushare.models.VendorSpec`
    whose ``name`` equals the entry-point name and whose ``api_version`` equals the core's
    :data:`~xpushare.models.API_VERSION`; its resource names must not be taken by another
    vendor. Otherwise the plugin is recorded as *failed* with the reason and unregistered,
    and the other plugins load on.

    Extension plugins (policies, tracing) do not implement this hook.
    """


@hookspec
def xpushare_register_policies(register: Callable[[str, Any], None]) -> None:
    """Contribute placement policies by calling ``register(name, policy)`` once per policy.

    Called once per process by the scheduling core when it first needs a policy, on the
    caller's thread, for every plugin (broadcast; there is no result). ``policy`` is an
    object with the methods of :class:`xpushare.scheduling.Policy`. A name registered twice
    is an error that names both plugins. The core's own policies (``binpack``, ``spread``,
    ``best-fit``, ``fgd``, ...) are registered through this same hook.
    """


# --------------------------------------------------------------------------------------------
# Node side: the vendor library's life cycle, detection, monitoring, health
# --------------------------------------------------------------------------------------------


@hookspec
def xpushare_startup(ctx: NodeContext) -> None:
    """Load and initialise the vendor's native library.

    Called once per process, before any other node-side hook of this vendor, on the vendor's
    library thread (use ``ctx.load_library`` to load it there). Raise
    :class:`~xpushare.errors.VendorUnavailable` with the reason (paths tried, what the loader
    said) when the library or the hardware is absent: the vendor is then *inactive* and no
    other node-side hook of it is called. Keep what you load in ``ctx.state``.
    """


@hookspec
def xpushare_shutdown(ctx: NodeContext) -> None:
    """Release the vendor's library (e.g. ``nvmlShutdown``).

    Called once when the process stops, on the vendor's library thread, only if
    ``xpushare_startup`` succeeded. Exceptions are logged and ignored.
    """


@hookspec(firstresult=True)
def xpushare_detect(ctx: NodeContext) -> Sequence[Device] | None:
    """Return the devices of this vendor on this node.

    Called by the node agent at start, periodically (every ``detect_interval`` seconds) and
    when a partitioning mode may have changed, and once by ``xpushare detect``; on the
    vendor's library thread. An empty list means "the library works and there are no
    devices"; raise :class:`~xpushare.errors.VendorUnavailable` when the vendor cannot be
    used here, and any other exception when detection failed ("could not detect"), which is
    reported as an error and keeps the last good inventory.

    Stops at the first non-``None`` result; ``None`` from every implementation means the
    vendor is inactive on this node with no reason given.
    """


@hookspec(firstresult=True)
def xpushare_monitor(ctx: NodeContext, devices: Sequence[Device]) -> MonitorSnapshot | None:
    """Sample usage of *devices* (utilization, memory, temperature, power, per-container use).

    Called by the node agent every ``monitor_interval`` seconds on the vendor's library
    thread; the result is kept as a snapshot that the metrics endpoint serves, so a scrape
    never calls into a vendor library. ``None``: the vendor does not monitor (only inventory
    and health metrics are exported). Stops at the first non-``None`` result.
    """


@hookspec(firstresult=True)
def xpushare_check_health(
    ctx: NodeContext, devices: Sequence[Device], wait_s: float
) -> Sequence[HealthEvent] | None:
    """Report devices that became unhealthy or recovered since the last call.

    Called by the node agent in a loop on the vendor's library thread; an implementation may
    block for at most *wait_s* seconds waiting for events (e.g. NVML's event set) and returns
    the changes seen, possibly none. A device absent from the result keeps its state.
    ``None``: the vendor has no health checks; devices stay as detect reported them. Stops at
    the first non-``None`` result.
    """


@hookspec(firstresult=True)
def xpushare_allocate(ctx: NodeContext, request: AllocateRequest) -> ContainerAllocation | None:
    """Prepare one container's share of this vendor's devices.

    Called by the node agent when kubelet calls the device plugin's ``Allocate`` for a
    container, on the vendor's library thread, after the core matched kubelet's request to
    the pod's assignment (``request.slices``: which devices, how much memory and compute).
    Return the environment variables (e.g. visible devices and in-container limits), device
    nodes, mounts and CDI device names the container needs, and in ``record`` the names of
    whatever it created on the node (given back to ``xpushare_release`` when the pod ends).
    ``request.pod`` names the pod (namespace, name, uid) and ``request.pod_annotations`` holds
    its annotations, for per-pod settings. Raise an exception whose message
    names the pod and device to refuse; kubelet then fails the container's start with it.

    Stops at the first non-``None`` result; ``None`` from every implementation gives the
    container nothing beyond what kubelet does for the resource itself.
    """


@hookspec
def xpushare_release(ctx: NodeContext, request: ReleaseRequest) -> None:
    """Free what this vendor created for a pod that has ended (instances, configurations, files).

    Called by the node agent on the vendor's library thread, serialised with ``allocate``,
    once every container of a pod that this vendor allocated on this node is gone: the API
    server reports the pod deleted or finished (``Succeeded``/``Failed``), or no longer knows
    it, **and**, where kubelet's PodResources API answers, kubelet no longer lists the pod (a
    force-deleted pod whose containers still run is released only when they stop).
    ``request.containers`` lists every Allocate of this vendor for the pod, each with the
    ``record`` its allocate returned (:attr:`~xpushare.models.ContainerAllocation.record`);
    the agent keeps those records on the node's disk, so a pod that ended while the agent was
    down is released after it starts again.

    **At least once, and safely repeatable**: the agent may call it again for the same pod
    (it stopped before noting the release done, or an earlier call raised), so freeing what
    is already gone must succeed. A container whose ``record`` is ``None`` may or may not have
    had something created (allocate failed, or the agent stopped while it ran): find it by the
    pod's uid and the container's name, which is why what allocate creates should be named
    after them. Raise to say the release failed: the agent logs it with the pod, counts it in
    ``xpushare_vendor_hook_errors_total{hook="release"}``, keeps the record and calls again
    later (with a growing delay); the pod itself is unaffected, it has ended. A vendor that
    creates nothing at Allocate need not implement this hook.
    """


@hookspec(firstresult=True)
def xpushare_preferred_allocation(
    ctx: NodeContext, available: Sequence[str], must_include: Sequence[str], size: int
) -> Sequence[str] | None:
    """Pick *size* device ids from *available* for kubelet's ``GetPreferredAllocation``.

    Called on the vendor's library thread. The answer must contain every id of
    *must_include*, only ids from *available*, and exactly *size* ids. ``None``: the core
    answers with the devices of the pending assignment if there is one, else the first ids in
    order. Stops at the first non-``None`` result.
    """


# --------------------------------------------------------------------------------------------
# Scheduler side: requests, fit, scoring, bind and admission (pure functions)
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def xpushare_resource_request(
    vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    """Parse what *container* of *pod* asks of this vendor.

    Called by the admission webhook and the extender for every container of a pod, on the
    caller's thread. The core's default reads the vendor's resource names from the limits
    (count, memory in MiB or percent, compute percent) and the generic constraint annotations
    (``xpushare.io/use-model`` and friends, and HAMi's ``<vendor>/use-gputype`` keys); a
    vendor implements this hook for its own units or annotations. Raise ``ValueError`` with a
    message for the user on an invalid request.

    Stops at the first non-``None`` result; ``None`` from every implementation means the
    container does not ask for this vendor's devices.

    Not called for a container whose limits and requests name none of the vendor's
    resources (``VendorSpec.resource_names`` and ``VendorSpec.request_resources``): such a
    container asks nothing of the vendor. A vendor whose requests come from elsewhere too
    sets ``request_resources=None`` and is asked for every container.
    """


@hookspec(firstresult=True)
def xpushare_fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
    memory_overcommit: float,
) -> FitResult | None:
    """Decide whether *request* fits on *node* and which devices it gets.

    Called by the extender's ``/filter`` and ``/bind`` and by the simulator for each
    candidate node, on the caller's thread, with ``node.devices`` holding this vendor's
    devices only, *usage* the allocated share per device id (missing id: nothing used),
    *device_order* the device ids in the order the placement policy prefers them, and
    *memory_overcommit* the factor by which device memory may be over-booked.

    The core's default implements the sharing model of GPU-like vendors (health, model and
    UUID constraints, share slots, exclusive use, memory, compute, NUMA binding); a vendor
    implements this hook for rules of its own (topology, partitions) and may return ``None``
    to fall back to the default. A non-fitting result must say why in ``reasons``.

    Stops at the first non-``None`` result.
    """


@hookspec(firstresult=True)
def xpushare_fit_applies(devices: Sequence[Device]) -> bool | None:
    """Whether this vendor's ``xpushare_fit`` may decide anything on a node with *devices*.

    Called by the placement engine (extender and simulator) once per node inventory: when a
    node's devices of this vendor are registered or change, never per request; on the
    caller's thread, with this vendor's devices of that node. Return ``False`` when
    ``xpushare_fit`` answers ``None`` on such a node for every request that names no
    partition: the core's own fit then decides there without building the hook's views,
    which is what keeps a stream of new request shapes at microseconds a node instead of tens
    (``/filter`` asks every candidate node; benchmarks/bench_shapes.py). Requests that name a
    partition or a mode (``ContainerRequest.mode``) are always given to ``xpushare_fit``. A
    vendor whose fit reads the node's labels or annotations must not return ``False``.

    Stops at the first non-``None`` result; ``None`` (or no implementation) means ``True``:
    ``xpushare_fit`` is asked on every node, as without this hook. An exception counts as
    ``True`` and is logged.
    """


@hookspec(firstresult=True)
def xpushare_score(
    request: ContainerRequest, node: NodeView, fit: FitResult, usage: Mapping[str, DeviceUsage]
) -> float | None:
    """A vendor's own preference in [0, 1] for a fitting placement, e.g. better-linked GPUs.

    Called by the extender's ``/prioritize`` and the simulator after the placement policy
    scored the node, on the caller's thread. The policy's score is blended with this one
    (weight from configuration). ``None``: the vendor has no preference. Stops at the first
    non-``None`` result.
    """


@hookspec(firstresult=True)
def xpushare_patch_annotations(pod: PodView, assignment: PodAssignment) -> Mapping[str, str] | None:
    """Extra pod annotations this vendor needs written at bind (e.g. HAMi-compatible keys).

    Called by the extender's ``/bind`` once per vendor of the pod, on the caller's thread,
    with the pod's whole assignment. The core merges every vendor's annotations with its own
    assignment annotation into the one PATCH it sends with the binding; a key under
    ``xpushare.io/`` or one another vendor set is refused. ``None``: nothing extra. Stops at
    the first non-``None`` result.
    """


@hookspec(firstresult=True)
def xpushare_mutate_admission(
    pod: PodView, container: ContainerView, index: int, request: ContainerRequest
) -> Sequence[JsonPatchOp] | None:
    """Extra JSON patches for a container that asks for this vendor's devices.

    Called by the admission webhook for each such container (*index* is its position in
    ``spec.containers``, or in ``spec.initContainers`` when ``container.init``), on the
    caller's thread, after the core's own validation and defaults. Raise
    :class:`~xpushare.errors.AdmissionDenied` to refuse the pod with a message for its
    author. The core concatenates all patches and refuses two that write the same path.
    ``None``: nothing extra. Stops at the first non-``None`` result.
    """


@hookspec(firstresult=True)
def xpushare_admission_guard(
    vendor: VendorSpec, config: Mapping[str, Any]
) -> AdmissionGuard | None:
    """Say what the admission webhook must refuse so that this vendor's isolation holds.

    Called once per vendor when the scheduler builds its admission webhook (at start), on the
    thread that builds it (the event loop's), with the vendor's spec and its configuration
    section (``vendors.<name>``, the same the node agent gets), so paths that the
    configuration moves are declared where they really are. Pure: no I/O.

    The result (:class:`~xpushare.models.AdmissionGuard`) names the environment variables
    that switch the in-container limits off, the container and node paths the enforcement
    depends on (for HAMi-core: ``/etc/ld.so.preload`` and its directory) and the vendor's
    device nodes. The webhook refuses, unless the namespace is in
    ``webhook.bypass_namespaces``: those variables (and ``envFrom`` prefixes that could form
    them) in pods asking for this vendor's devices; a volume mounted at, under or above a
    container path in a container that gets this vendor's shares; a hostPath volume at,
    under or above a node path in such a pod; and a hostPath volume holding a device node
    mounted by a privileged container of a pod that asks for no managed device. What the
    core refuses for every vendor (privileged containers, ``CAP_SYS_ADMIN``, ``hostPID`` in
    device pods) needs no declaration.

    A result that fails validation, or an exception, is an error of this vendor: its pods are
    then refused (HTTP 500 in the review) rather than admitted unchecked. ``None``: the
    vendor's isolation needs nothing beyond the core's rules (e.g. whole devices only).
    Stops at the first non-``None`` result.
    """

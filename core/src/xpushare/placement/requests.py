"""From a pod spec to a :class:`~xpushare.scheduling.PodRequest`, through the vendors' hooks.

Each vendor parses the containers' resources with its ``xpushare_resource_request`` hook (the
core's default reads the vendor's resource names); CPU and memory are read here the way
kube-scheduler computes a pod's effective request, for the node-resources check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpushare.scheduling import PodRequest
from xpushare.scheduling.podpolicy import pod_policy
from xpushare.scheduling.quantity import QuantityError, cpu_millis, memory_mib, shown
from xpushare.scheduling.request import effective_host_request

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from xpushare.models import ContainerRequest, ContainerView, PodView
    from xpushare.plugins import VendorHandle


def _host(container: ContainerView, name: str, pod: PodView) -> str | None:
    value = container.requests.get(name)
    if value is None:
        # kube-apiserver defaults a missing request to the limit.
        value = container.limits.get(name)
    return value


def _parsed(pod: PodView, c: ContainerView, name: str, convert: Callable[[str], int]) -> int:
    """The container's *name* request converted, 0 when absent; ``ValueError`` says where."""
    raw = _host(c, name, pod)
    if raw is None:
        return 0
    try:
        return convert(raw)
    except QuantityError as exc:
        kind = "init container" if c.init else "container"
        raise ValueError(
            f"pod {pod.ref}, {kind} {c.name!r}: {name} {shown(raw)} {exc.reason}; give a "
            "Kubernetes quantity such as '500m', '2' or '16Gi'"
        ) from None


def host_requests(pod: PodView) -> tuple[int, int]:
    """(CPU millicores, memory MiB) the pod requests, as kube-scheduler counts them."""
    app_cpu: list[int] = []
    init_cpu: list[int] = []
    app_mem: list[int] = []
    init_mem: list[int] = []
    for c in pod.containers:
        cpu = _parsed(pod, c, "cpu", cpu_millis)
        mem = _parsed(pod, c, "memory", memory_mib)
        (init_cpu if c.init else app_cpu).append(cpu)
        (init_mem if c.init else app_mem).append(mem)
    return effective_host_request(app_cpu, init_cpu), effective_host_request(app_mem, init_mem)


def pod_request(pod: PodView, vendors: Iterable[VendorHandle]) -> PodRequest:
    """Every vendor's demands of every container of *pod*, and its CPU and memory.

    ``ValueError`` (a user's mistake, explained) or :class:`~xpushare.errors.PluginError` (a
    vendor's) propagate to the caller.
    """
    handles = list(vendors)
    app: list[ContainerRequest] = []
    init: list[ContainerRequest] = []
    for container in pod.containers:
        for handle in handles:
            req = handle.resource_request(pod=pod, container=container)
            if req is not None:
                (init if container.init else app).append(req)
    cpu, mem = host_requests(pod)
    try:
        policy = pod_policy(pod.annotations) if pod.annotations else None
    except ValueError as exc:
        raise ValueError(f"pod {pod.ref}: {exc}") from None
    return PodRequest.build(
        app, init=init, cpu_milli=cpu, memory_mib=mem, pod=pod.ref, policy=policy
    )

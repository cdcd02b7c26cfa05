"""From a pod spec to a :class:`~xpushare.scheduling.PodRequest`, through the vendors' hooks.

Each vendor parses the containers' resources with its ``xpushare_resource_request`` hook (the
core's default reads the vendor's resource names); CPU and memory are read here the way
kube-scheduler computes a pod's effective request, for the node-resources check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpushare.scheduling import PodRequest
from xpushare.scheduling.quantity import cpu_millis, memory_mib
from xpushare.scheduling.request import effective_host_request

if TYPE_CHECKING:
    from collections.abc import Iterable

    from xpushare.models import ContainerRequest, ContainerView, PodView
    from xpushare.plugins import VendorHandle


def _host(container: ContainerView, name: str, pod: PodView) -> str | None:
    value = container.requests.get(name)
    if value is None:
        # kube-apiserver defaults a missing request to the limit.
        value = container.limits.get(name)
    return value


def host_requests(pod: PodView) -> tuple[int, int]:
    """(CPU millicores, memory MiB) the pod requests, as kube-scheduler counts them."""
    app_cpu: list[int] = []
    init_cpu: list[int] = []
    app_mem: list[int] = []
    init_mem: list[int] = []
    for c in pod.containers:
        try:
            raw_cpu = _host(c, "cpu", pod)
            raw_mem = _host(c, "memory", pod)
            cpu = cpu_millis(raw_cpu) if raw_cpu is not None else 0
            mem = memory_mib(raw_mem) if raw_mem is not None else 0
        except ValueError as exc:
            raise ValueError(f"pod {pod.ref}, container {c.name!r}: {exc}") from None
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
    return PodRequest.build(app, init=init, cpu_milli=cpu, memory_mib=mem, pod=pod.ref)

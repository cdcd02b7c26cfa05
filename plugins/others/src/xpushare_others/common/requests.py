"""Adjusting the core's request parser to a vendor's HAMi defaults, without rewriting it.

Why a wrapper: the core's default ``xpushare_resource_request`` already reads counts, memory
and compute under the vendor's resource names with HAMi's rules; what differs per vendor is a
default or a unit (hami-protocol.md §8.2: Hygon's cores default to 100, Moore Threads counts
compute in sixteenths, MetaX reads memory in GiB or bytes). A vendor therefore implements the
hook as a pluggy wrapper (``@hookimpl(wrapper=True)``): it lets the core parse, then corrects
the parsed :class:`~xpushare.models.ContainerRequest` with the helpers below.
"""

from __future__ import annotations

from xpushare.models import ContainerRequest, ContainerView, PodView


def raw_value(container: ContainerView, name: str | None) -> str | None:
    """The container's value for resource *name*: its limit, else its request."""
    if name is None:
        return None
    value = container.limits.get(name)
    return value if value is not None else container.requests.get(name)


def who(pod: PodView, container: ContainerView) -> str:
    kind = "init container" if container.init else "container"
    return f"pod {pod.ref}, {kind} {container.name!r}"


def whole_devices(request: ContainerRequest) -> ContainerRequest:
    """*request* turned into whole devices used by nobody else (all memory, all compute)."""
    return request.model_copy(
        update={
            "exclusive": True,
            "compute_percent": 100,
            "memory_mib": None,
            "memory_percent": None,
        }
    )


def with_compute(request: ContainerRequest, percent: int) -> ContainerRequest:
    """*request* with *percent* of each device's compute; 100 means the device alone."""
    # model_copy does not validate: build anew so the bounds hold.
    data = request.model_dump()
    data.update(compute_percent=percent, exclusive=percent >= 100)
    return ContainerRequest.model_validate(data)

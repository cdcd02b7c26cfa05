"""Adjusting the core's request parser to a vendor's HAMi defaults, without rewriting it.

Why a wrapper: the core's default ``xpushare_resource_request`` already reads counts, memory
and compute under the vendor's resource names with HAMi's rules; what differs per vendor is a
default or a unit (hami-protocol.md §8.2: Hygon's cores default to 100, Moore Threads counts
compute in sixteenths, MetaX reads memory in GiB or bytes). A vendor therefore implements the
hook as a pluggy wrapper (``@hookimpl(wrapper=True)``): it lets the core parse, then corrects
the parsed :class:`~xpushare.models.ContainerRequest` with the helpers below.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Final

from xpushare.models import ContainerRequest, ContainerView, PodView

# Kubernetes quantity suffixes (binary and decimal), as bytes multipliers.
_SUFFIX: Final = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
# At most 19 digits and 6 decimals: bounded before any arithmetic (a pod is hostile input).
_QUANTITY: Final = re.compile(r"^\s*([0-9]{1,19}(?:\.[0-9]{1,6})?)\s*([A-Za-z]*)\s*$")
MIB: Final = 2**20
#: HAMi's per-pod scheduling policy; ``mutex`` asks for devices nobody else uses.
POLICY_KEY: Final = "hami.io/gpu-scheduler-policy"
MUTEX: Final = "mutex"


def raw_value(container: ContainerView, name: str | None) -> str | None:
    """The container's value for resource *name*: its limit, else its request."""
    if name is None:
        return None
    value = container.limits.get(name)
    return value if value is not None else container.requests.get(name)


def who(pod: PodView, container: ContainerView) -> str:
    kind = "init container" if container.init else "container"
    return f"pod {pod.ref}, {kind} {container.name!r}"


def mutex(pod: PodView) -> bool:
    """Whether *pod* asks for idle devices only (HAMi's ``gpu-scheduler-policy: mutex``)."""
    policies = pod.annotations.get(POLICY_KEY, "")[:256].split(",")
    return any(p.strip() == MUTEX for p in policies)


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


def bytes_mib(raw: str, where: str) -> int | None:
    """MiB (rounded up) of a memory quantity with a unit, read as bytes; None for a bare number.

    Why: HAMi reads a vendor's memory resource as a plain number in the vendor's unit, but a
    value with a suffix (``4Gi``) as bytes (MetaX, Kunlun); the core's parser only knows the
    bare form. *where* names the pod, container and resource in errors.
    """
    match = _QUANTITY.match(raw)
    if not match or not match.group(2):
        return None
    number, suffix = match.groups()
    factor = _SUFFIX.get(suffix)
    if factor is None:
        raise ValueError(f"{where} {raw!r} has an unknown unit {suffix!r}")
    try:
        total = Decimal(number) * factor
    except InvalidOperation:
        raise ValueError(f"{where} {raw!r} is not a quantity") from None
    return int(-(-total // MIB))

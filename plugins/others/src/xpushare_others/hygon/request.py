"""Hygon's request defaults on top of the core parser (hami-protocol.md §8.2, ``DCU``).

HAMi gives a DCU container all of the DCU's cores unless ``hygon.com/dcucores`` says
otherwise: a request without cores is exclusive in compute. Memory without a value is the
whole DCU's, as the core already does. A container sharing DCUs may use one DCU only.
"""

from __future__ import annotations

from xpushare.models import ContainerRequest, ContainerView, PodView, VendorSpec
from xpushare_others.common.requests import raw_value, who, with_compute


def adjust(
    request: ContainerRequest | None, vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    if request is None:
        return None
    if raw_value(container, vendor.resource_names.compute) is None:
        request = with_compute(request, 100)
    shared = not request.exclusive or request.memory_mib is not None
    if request.count > 1 and shared:
        # The DTK runtime reads one vDCU config per container (HAMi refuses at Allocate;
        # refusing at admission tells the user at once).
        raise ValueError(
            f"{who(pod, container)}: a container sharing a Hygon DCU may use only one DCU; ask "
            f"for {request.count} whole DCUs (no {vendor.resource_names.memory}, "
            f"{vendor.resource_names.compute}: 100) or for one"
        )
    return request

"""Moore Threads request rules on top of the core parser (hami-protocol.md §8.2).

``mthreads.com/sgpu-core`` counts sixteenths of a GPU, stored as a percent rounded down (so
sixteen one-core sGPUs always fit on a GPU); a container asking for more than one GPU gets
them whole; one shared GPU's memory must be one of HAMi's sGPU sizes.
"""

from __future__ import annotations

from xpushare.models import ContainerRequest, ContainerView, PodView, VendorSpec
from xpushare_others.common.requests import raw_value, who, whole_devices, with_compute
from xpushare_others.mthreads.config import CORES_PER_GPU, SGPU_MEMORY_SIZES


def adjust(
    request: ContainerRequest | None, vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    if request is None:
        return None
    where = who(pod, container)
    names = vendor.resource_names
    if request.count > 1:
        return whole_devices(request)
    if raw_value(container, names.compute) is not None:
        cores = request.compute_percent  # the core parsed the number as a percent
        if not 1 <= cores <= CORES_PER_GPU:
            raise ValueError(
                f"{where}: {names.compute} counts sixteenths of a GPU, 1 to {CORES_PER_GPU}, "
                f"got {cores}"
            )
        request = with_compute(request, cores * 100 // CORES_PER_GPU)
    if request.memory_mib is not None and not request.exclusive:
        units = request.memory_mib // vendor.memory_unit_mib
        if units not in SGPU_MEMORY_SIZES:
            sizes = ", ".join(str(s) for s in SGPU_MEMORY_SIZES)
            raise ValueError(
                f"{where}: {names.memory} of a shared GPU must be one of {sizes} (units of "
                f"{vendor.memory_unit_mib} MiB), got {units}"
            )
    return request

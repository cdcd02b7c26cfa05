"""Moore Threads request rules on top of the core parser (hami-protocol.md §8.2).

``mthreads.com/sgpu-core`` counts sixteenths of a GPU, stored as a percent rounded down (so
sixteen one-core sGPUs always fit on a GPU); a container asking for more than one GPU gets
them whole; one shared GPU's memory must be one of HAMi's sGPU sizes. HAMi reads the UUID
choice under ``mthreads.ai`` (``mthreads.ai/use-gpuuuid``, ``mthreads.ai/nouse-gpuuuid``), not
under the resources' ``mthreads.com`` that the core reads: both are honoured.
"""

from __future__ import annotations

from typing import Final

from xpushare.models import ContainerRequest, ContainerView, PodView, VendorSpec
from xpushare.scheduling.quantity import has_unit
from xpushare_others.common.requests import raw_value, who, whole_devices, with_compute
from xpushare_others.mthreads.config import CORES_PER_GPU, SGPU_MEMORY_SIZES

#: HAMi's Moore Threads UUID annotations (pkg/device/mthreads/device.go, MthreadsUseUUID).
USE_UUID: Final = "mthreads.ai/use-gpuuuid"
NOUSE_UUID: Final = "mthreads.ai/nouse-gpuuuid"
#: Most UUIDs one annotation may list: no node carries more GPUs than that (a pod is hostile
#: input, so the split is bounded before anything is kept).
MAX_UUIDS: Final = 256


def _uuids(pod: PodView, key: str, where: str, known: tuple[str, ...]) -> tuple[str, ...]:
    """*known* with the UUIDs annotation *key* of *pod* lists, each once, in order."""
    raw = pod.annotations.get(key)
    if raw is None:
        return known
    items = [i.strip() for i in raw.split(",", MAX_UUIDS) if i.strip()]
    if len(items) > MAX_UUIDS:
        raise ValueError(f"{where}: annotation {key} lists more than {MAX_UUIDS} GPUs")
    return tuple(dict.fromkeys((*known, *items)))


def adjust(
    request: ContainerRequest | None, vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    if request is None:
        return None
    where = who(pod, container)
    names = vendor.resource_names
    include = _uuids(pod, USE_UUID, where, request.uuids_include)
    exclude = _uuids(pod, NOUSE_UUID, where, request.uuids_exclude)
    if (include, exclude) != (request.uuids_include, request.uuids_exclude):
        request = request.model_copy(update={"uuids_include": include, "uuids_exclude": exclude})
    if request.count > 1:
        return whole_devices(request)
    if raw_value(container, names.compute) is not None:
        cores = request.compute_percent  # the core parsed the number as a percent
        if cores < 1:
            raise ValueError(
                f"{where}: {names.compute} counts sixteenths of a GPU, 1 to {CORES_PER_GPU}, "
                f"got {cores}"
            )
        # Above sixteen: the whole GPU, as HAMi clamps a request to the device's total (the
        # webhook warns and writes 16 into the spec).
        request = with_compute(request, min(cores, CORES_PER_GPU) * 100 // CORES_PER_GPU)
    raw_memory = raw_value(container, names.memory)
    # A value with a unit ("8Gi") is refused by the plugin host after this wrapper, with
    # the units it likely meant; the size list below would only show the suffix multiplied.
    if (
        request.memory_mib is not None
        and not request.exclusive
        and not (raw_memory is not None and has_unit(raw_memory))
    ):
        units = request.memory_mib // vendor.memory_unit_mib
        if units not in SGPU_MEMORY_SIZES:
            sizes = ", ".join(str(s) for s in SGPU_MEMORY_SIZES)
            raise ValueError(
                f"{where}: {names.memory} of a shared GPU must be one of {sizes} (units of "
                f"{vendor.memory_unit_mib} MiB), got {units}"
            )
    return request

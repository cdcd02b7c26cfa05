"""Enflame request rules on top of the core parser: whole GCUs, DRS asks, HAMi's keys.

HAMi (hami-protocol.md §8.1 and §8.2): ``enflame.com/gcu: n`` gives *n* whole GCUs (all memory
and cores, no sharing). A DRS container always gets one partition of one GCU:
``enflame.com/drs-gcu: n`` asks for the profile of *n* slices (it wins when given), else
``enflame.com/gcu-memory`` (> 0) and ``enflame.com/gcu-core`` (1-100) ask for the smallest
profile that holds them (:mod:`.drs`). UUID selection is read from ``enflame.com/use-gpuuuid`` /
``nouse-gpuuuid`` (by the core's parser), and ``hami.io/gpu-scheduler-policy: mutex`` asks for an
idle GCU.

Why the webhook rewrites ``drs-gcu`` to 1: kubelet hands a container one id per unit of its
count resource, and a partition is one share of one GCU, so a container asking 3 slices gets
one share. The ask itself is kept in the container's environment as
``XPUSHARE_ENFLAME_DRS_REQUEST`` (written by the webhook, read first by the parser), so the
scheduler reads the same ask after the rewrite. A pod author who writes it asks for that
partition and is charged for it, nothing more.
"""

from __future__ import annotations

from typing import Final

from xpushare.models import ContainerRequest, ContainerView, JsonPatchOp, PodView, VendorSpec
from xpushare.models.request import MAX_DEVICE_MEMORY_MIB
from xpushare_others.common.requests import bytes_mib, mutex, raw_value, who, whole_devices
from xpushare_others.enflame.config import DRS_VENDOR
from xpushare_others.enflame.drs import Ask, decode_ask, encode_ask

#: The container variable holding a DRS ask (``drs:slices=3``), written at admission.
REQUEST_ENV: Final = "XPUSHARE_ENFLAME_DRS_REQUEST"


def _ask(
    request: ContainerRequest, vendor: VendorSpec, container: ContainerView, where: str
) -> Ask:
    names = vendor.resource_names
    written = container.env.get(REQUEST_ENV)
    if written is not None:
        ask = decode_ask(written.strip())
        if ask is None:
            raise ValueError(
                f"{where}: environment variable {REQUEST_ENV}={written[:40]!r} is not a DRS "
                "request (drs:slices=N); remove it: the admission webhook writes it"
            )
        return ask
    if raw_value(container, names.count) is not None:
        return Ask(slices=request.count)
    core = request.compute_percent
    if raw_value(container, names.compute) is not None and core <= 0:
        raise ValueError(f"{where}: {names.compute} must be 1 to 100 (percent), got 0")
    raw = raw_value(container, names.memory)
    if raw is None:
        return Ask(unit="gb", memory=0, core=core)
    mib = bytes_mib(raw, f"{where}: {names.memory}")
    if mib is not None:
        if not 0 < mib <= MAX_DEVICE_MEMORY_MIB:
            raise ValueError(f"{where}: {names.memory} {raw[:40]!r} is not 1 byte to 16 TiB")
        return Ask(unit="mib", memory=mib, core=core)
    if not request.memory_mib:
        raise ValueError(f"{where}: {names.memory} must be greater than 0")
    return Ask(unit="raw", memory=request.memory_mib, core=core)


def adjust(
    request: ContainerRequest | None, vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    if request is None:
        return None
    if vendor.name != DRS_VENDOR:
        return whole_devices(request)
    ask = _ask(request, vendor, container, who(pod, container))
    data = request.model_dump()
    # memory 0 (not None): the profile decides, so the webhook does not read the request
    # as a whole device and add compute 100.
    data.update(
        count=1,
        memory_mib=0,
        memory_percent=None,
        compute_percent=0,
        exclusive=mutex(pod),
        partition=encode_ask(ask),
    )
    return ContainerRequest.model_validate(data)


def _pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def admission(
    count_name: str, container: ContainerView, index: int, request: ContainerRequest
) -> list[JsonPatchOp]:
    """Keep the DRS ask in the container's environment and ask kubelet for one share."""
    if request.vendor != DRS_VENDOR or not request.partition:
        return []
    base = f"/spec/{'initContainers' if container.init else 'containers'}/{index}"
    ops: list[JsonPatchOp] = []
    if container.env.get(REQUEST_ENV) != request.partition:
        entry = {"name": REQUEST_ENV, "value": request.partition}
        if container.env:
            ops.append(JsonPatchOp(op="add", path=f"{base}/env/-", value=entry))
        else:
            ops.append(JsonPatchOp(op="add", path=f"{base}/env", value=[entry]))
    for source, kind in ((container.limits, "limits"), (container.requests, "requests")):
        value = source.get(count_name)
        if value is not None and value.strip() != "1":
            path = f"{base}/resources/{kind}/{_pointer(count_name)}"
            ops.append(JsonPatchOp(op="replace", path=path, value="1"))
    return ops

"""Kunlun request rules on top of the core parser: whole XPUs, vXPU slice sizes, HAMi's keys.

HAMi (hami-protocol.md §8.1 and §8.2): ``kunlunxin.com/xpu`` gives whole XPUs (all memory, no
sharing); ``kunlunxin.com/vxpu`` with ``kunlunxin.com/vxpu-memory`` (MiB; a value with a unit
is bytes) is rounded up to a slice of 24576, 49152 or 98304 MiB (larger asks also get 98304,
as in HAMi), with cores ``memory * 100 / 98304``; no memory means a whole XPU. HAMi's webhook
writes the rounded size back into the pod, and so does this one. UUID selection is read from
``baidu.com/use-gpuuuid`` / ``nouse-gpuuuid`` and ``hami.io/use-xpu-uuid`` / ``no-use-xpu-uuid``,
and HAMi's per-pod policy ``hami.io/gpu-scheduler-policy: mutex`` asks for idle XPUs only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from xpushare.models import ContainerRequest, ContainerView, JsonPatchOp, PodView, VendorSpec
from xpushare_others.common.requests import bytes_mib, mutex, raw_value, who, whole_devices
from xpushare_others.kunlun.config import VXPU_SIZES_MIB, VXPU_VENDOR, XPU_MEMORY_MIB

USE_UUID_KEYS: Final = ("baidu.com/use-gpuuuid", "hami.io/use-xpu-uuid")
NOUSE_UUID_KEYS: Final = ("baidu.com/nouse-gpuuuid", "hami.io/no-use-xpu-uuid")
#: Most ids one selection annotation may list: a node has at most a few boards of eight.
MAX_UUIDS: Final = 256


def slice_size(mib: int) -> int:
    """The vXPU slice a request of *mib* MiB gets (HAMi's trimMemory)."""
    return next((size for size in VXPU_SIZES_MIB if mib <= size), XPU_MEMORY_MIB)


def _ids(annotations: Mapping[str, str], keys: tuple[str, ...], where: str) -> tuple[str, ...]:
    out: list[str] = []
    for key in keys:
        raw = annotations.get(key, "")
        items = [i.strip() for i in raw.split(",", MAX_UUIDS) if i.strip()]
        if len(items) > MAX_UUIDS:
            raise ValueError(f"{where}: annotation {key} lists more than {MAX_UUIDS} XPUs")
        out += [i for i in items if i not in out]
    return tuple(out)


def vxpu_memory(container: ContainerView, name: str | None, where: str) -> int | None:
    """The container's vXPU memory in MiB before rounding; None when it asks for none."""
    raw = raw_value(container, name)
    if raw is None:
        return None
    mib = bytes_mib(raw, f"{where}: {name}")
    if mib is not None:
        return mib
    text = raw.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise ValueError(f"{where}: {name} must be a whole number of MiB, got {raw[:40]!r}")
    return int(text)


def adjust(
    request: ContainerRequest | None, vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    if request is None:
        return None
    where = who(pod, container)
    update = {
        "uuids_include": tuple(
            dict.fromkeys((*request.uuids_include, *_ids(pod.annotations, USE_UUID_KEYS, where)))
        ),
        "uuids_exclude": tuple(
            dict.fromkeys((*request.uuids_exclude, *_ids(pod.annotations, NOUSE_UUID_KEYS, where)))
        ),
    }
    if vendor.name != VXPU_VENDOR:
        return whole_devices(request).model_copy(update=update)
    mib = vxpu_memory(container, vendor.resource_names.memory, where)
    data = request.model_dump()
    data.update(update, exclusive=mutex(pod))
    if not mib:
        # No memory (or 0): a whole XPU, as in HAMi (100 % of memory and cores).
        data.update(memory_mib=None, memory_percent=100, compute_percent=100)
    else:
        size = slice_size(mib)
        data.update(
            memory_mib=size, memory_percent=None, compute_percent=size * 100 // XPU_MEMORY_MIB
        )
    return ContainerRequest.model_validate(data)


def _pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def admission(
    name: str | None, container: ContainerView, index: int, request: ContainerRequest
) -> list[JsonPatchOp]:
    """Write the rounded vXPU size into the container's limits and requests, as HAMi does.

    *name* is the vXPU memory resource of this process's settings.
    """
    if request.vendor != VXPU_VENDOR or name is None or request.memory_mib is None:
        return []
    raw = container.limits.get(name)
    if raw is None or raw.strip() == str(request.memory_mib):
        return []
    base = f"/spec/{'initContainers' if container.init else 'containers'}/{index}/resources"
    value = str(request.memory_mib)
    ops = [JsonPatchOp(op="replace", path=f"{base}/limits/{_pointer(name)}", value=value)]
    if name in container.requests:
        ops.append(JsonPatchOp(op="replace", path=f"{base}/requests/{_pointer(name)}", value=value))
    elif container.requests:
        ops.append(JsonPatchOp(op="add", path=f"{base}/requests/{_pointer(name)}", value=value))
    else:
        ops.append(JsonPatchOp(op="add", path=f"{base}/requests", value={name: value}))
    return ops

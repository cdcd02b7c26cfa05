"""Neuron request rules on top of the core parser: whole devices or NeuronCores, HAMi's keys.

HAMi (hami-protocol.md §8.2): ``aws.amazon.com/neuron: n`` is *n* whole devices;
``aws.amazon.com/neuroncore: c`` (an integer above 0) is one device with *c* cores when *c* is
at most ``cores_per_device``, else ``c / cores_per_device`` whole devices, and must then be a
multiple of it. UUID selection is read from ``aws.amazon.com/use-neuron-uuid`` /
``nouse-neuron-uuid``; ``hami.io/gpu-scheduler-policy: mutex`` asks for an idle device.

Why the core count wins when both are given (HAMi reads the device count first): the webhook
adds ``aws.amazon.com/neuron`` (the devices the cores need) to a container that asks for cores
only, because kubelet hands out shares of that resource; reading it first would turn the
cores back into whole devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from xpushare.models import ContainerRequest, ContainerView, PodView, VendorSpec
from xpushare.models.request import MAX_DEVICE_COUNT
from xpushare_others.common import settings
from xpushare_others.common.requests import mutex, raw_value, who, whole_devices
from xpushare_others.neuron.config import MAX_CORES, VENDOR, NeuronConfig

USE_UUID_KEYS: Final = ("aws.amazon.com/use-neuron-uuid", "xpushare.io/use-uuid")
NOUSE_UUID_KEYS: Final = ("aws.amazon.com/nouse-neuron-uuid", "xpushare.io/nouse-uuid")
#: Most ids one selection annotation may list: a node has at most 64 devices.
MAX_UUIDS: Final = 256
#: ``partition`` of a request for cores of one device.
_CORES_PREFIX: Final = "neuroncores:"


def wanted_cores(request: ContainerRequest) -> int | None:
    """Cores of one device the request asks; None for whole devices."""
    raw = request.partition or ""
    if not raw.startswith(_CORES_PREFIX) or len(raw) > 20:
        return None
    digits = raw[len(_CORES_PREFIX) :]
    return int(digits) if digits.isdigit() and 0 < int(digits) <= MAX_CORES else None


def _ids(annotations: Mapping[str, str], keys: tuple[str, ...], where: str) -> tuple[str, ...]:
    out: list[str] = []
    for key in keys:
        items = [i.strip() for i in annotations.get(key, "").split(",", MAX_UUIDS) if i.strip()]
        if len(items) > MAX_UUIDS:
            raise ValueError(f"{where}: annotation {key} lists more than {MAX_UUIDS} devices")
        out += [i for i in items if i not in out]
    return tuple(out)


def _cores(raw: str, name: str, where: str) -> int:
    text = raw.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 6:
        raise ValueError(f"{where}: {name} must be a whole number of NeuronCores, got {raw[:40]!r}")
    value = int(text)
    if value <= 0:
        raise ValueError(f"{where}: {name} must be greater than 0")
    return value


def adjust(
    request: ContainerRequest | None, vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    config = settings.cached(NeuronConfig, VENDOR, vendor.config)
    where = who(pod, container)
    raw = raw_value(container, config.core_resource)
    if raw is None:
        return None if request is None else _selected(whole_devices(request), pod, where)
    cores = _cores(raw, config.core_resource, where)
    per = config.cores_per_device
    if cores <= per:
        count, partition = 1, f"{_CORES_PREFIX}{cores}"
    elif cores % per:
        raise ValueError(
            f"{where}: {config.core_resource} must be 1 to {per} (one device) or a multiple "
            f"of {per} (whole devices of {per} cores), got {cores}"
        )
    else:
        count, partition = cores // per, None
    if count > MAX_DEVICE_COUNT:
        raise ValueError(f"{where}: {config.core_resource} {cores} needs more than "
                         f"{MAX_DEVICE_COUNT} devices")  # fmt: skip
    base = request or ContainerRequest(vendor=vendor.name, container=container.name)
    data = base.model_dump()
    data.update(count=count, memory_mib=None, memory_percent=None, partition=partition)
    if partition is None:
        data.update(compute_percent=100, exclusive=True)
    else:
        data.update(compute_percent=0, exclusive=mutex(pod))
    return _selected(ContainerRequest.model_validate(data), pod, where)


def _selected(request: ContainerRequest, pod: PodView, where: str) -> ContainerRequest:
    return request.model_copy(
        update={
            "uuids_include": tuple(
                dict.fromkeys(
                    (*request.uuids_include, *_ids(pod.annotations, USE_UUID_KEYS, where))
                )
            ),
            "uuids_exclude": tuple(
                dict.fromkeys(
                    (*request.uuids_exclude, *_ids(pod.annotations, NOUSE_UUID_KEYS, where))
                )
            ),
        }
    )

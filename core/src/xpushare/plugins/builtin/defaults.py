"""The core's default hook implementations, registered for every vendor as ``trylast``.

Built-in behaviour is itself a plugin (DESIGN.md §3): a vendor that leaves a scheduler-side
hook out gets these, and one that implements it may still return ``None`` to fall back here.

* ``xpushare_resource_request`` reads a container's limits (requests when a limit is absent)
  under the vendor's resource names, HAMi's way (hami-protocol.md §2.9): a device count, memory
  in the vendor's units (``memory_unit_mib`` MiB each) or as a percent of each device, and a
  compute percent, where 100 means the device is used exclusively (§3.8). Constraints come
  from pod annotations, ours (``xpushare.io/use-model`` ...) and HAMi's
  (``<domain>/use-gputype`` ...), so a HAMi user's pod specs keep their meaning. Values are
  checked as text before any arithmetic (:mod:`xpushare.scheduling.quantity`) and refused,
  naming the container, the resource and the limit, beyond what a Kubernetes quantity or a
  device can mean (:data:`~xpushare.models.request.MAX_DEVICE_COUNT`,
  :data:`~xpushare.models.request.MAX_DEVICE_MEMORY_MIB`). What HAMi clamps or ignores is
  taken as HAMi takes it, so a HAMi user's specs work unchanged, and :func:`hami_leniencies`
  says what was changed (the webhook passes it on as admission warnings): compute above 100
  is 100, a memory percent above 100 is 100 and one of 0 is ignored, so is a memory of 0
  (HAMi-core would read a 0 limit as none), a HAMi ``numa-bind`` that is not a Go boolean
  is false.
* ``xpushare_fit`` is :func:`xpushare.scheduling.default_fit`.
* ``xpushare_register_policies`` registers the core's placement policies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xpushare.hookspecs import hookimpl
from xpushare.models import (
    ContainerRequest,
    ContainerView,
    DeviceUsage,
    FitResult,
    NodeView,
    PodView,
    VendorSpec,
)
from xpushare.models.request import MAX_DEVICE_COUNT, MAX_DEVICE_MEMORY_MIB
from xpushare.scheduling import builtin_policies, default_fit
from xpushare.scheduling.quantity import (
    MAX_QUANTITY,
    QuantityRangeError,
    has_unit,
    parse_quantity,
    shown,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

#: Our constraint annotations (comma-separated lists; ``numa-bind`` is "true" or "false").
USE_MODEL = "xpushare.io/use-model"
NOUSE_MODEL = "xpushare.io/nouse-model"
USE_UUID = "xpushare.io/use-uuid"
NOUSE_UUID = "xpushare.io/nouse-uuid"
NUMA_BIND = "xpushare.io/numa-bind"

# HAMi's per-vendor keys live under the domain of the count resource, e.g. nvidia.com
# (hami-protocol.md §2.1, §8.1; AMD spells the UUID keys with a dash).
_HAMI_USE_MODEL = ("use-gputype",)
_HAMI_NOUSE_MODEL = ("nouse-gputype",)
_HAMI_USE_UUID = ("use-gpuuuid", "use-gpu-uuid")
_HAMI_NOUSE_UUID = ("nouse-gpuuuid", "nouse-gpu-uuid")
_HAMI_NUMA_BIND = ("numa-bind",)

#: What HAMi's ``numa-bind`` takes (Go's strconv.ParseBool); any other value is false there.
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
#: The largest compute and memory percents: HAMi clamps a larger request to this
#: (nvidia/device.go: Fit for cores, GenerateResourceRequests for the memory percent).
MAX_PERCENT = 100


def _who(pod: PodView, container: ContainerView) -> str:
    kind = "init container" if container.init else "container"
    return f"pod {pod.ref}, {kind} {container.name!r}"


def _value(container: ContainerView, name: str | None) -> str | None:
    if name is None:
        return None
    value = container.limits.get(name)
    if value is None:
        value = container.requests.get(name)
    return value


def _integer(raw: str, name: str, who: str, most: int = MAX_QUANTITY, advice: str = "") -> int:
    """The whole number *raw* of resource *name*, at most *most* (*advice* says what to ask).

    The quantity parser refuses, before any arithmetic, what no quantity can hold, so the
    conversion to ``int`` below handles at most 19 digits.
    """
    try:
        value = parse_quantity(raw)
    except QuantityRangeError as exc:
        raise ValueError(f"{who}: {name} is {shown(raw)}, which {exc.reason}; {advice}") from None
    except ValueError:
        raise ValueError(f"{who}: {name} must be a whole number, got {shown(raw)}") from None
    if value != value.to_integral_value():
        raise ValueError(f"{who}: {name} must be a whole number, got {shown(raw)}")
    number = int(value)
    if number > most:
        raise ValueError(f"{who}: {name} is {shown(raw)}, above {most:,}; {advice}")
    return number


def _list(annotations: Mapping[str, str], keys: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for key in keys:
        for item in annotations.get(key, "").split(","):
            item = item.strip()
            if item and item not in out:
                out.append(item)
    return tuple(out)


def _flag(annotations: Mapping[str, str], keys: Sequence[str], who: str) -> bool:
    """Whether one of *keys* is true: ours (the first) strictly, HAMi's as HAMi reads them."""
    for n, key in enumerate(keys):
        raw = annotations.get(key)
        if raw is None:
            continue
        if n:
            if raw in _GO_TRUE:
                return True
            continue  # false, or not a boolean: false for HAMi (hami_leniencies warns)
        value = raw.strip().lower()
        if value not in ("true", "false"):
            raise ValueError(f"{who}: annotation {key} must be 'true' or 'false', got {shown(raw)}")
        if value == "true":
            return True
    return False


@hookimpl(trylast=True)
def xpushare_resource_request(
    vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    names = vendor.resource_names
    who = _who(pod, container)
    raw_count = _value(container, names.count)
    raw_memory = _value(container, names.memory)
    raw_percent = _value(container, names.memory_percent)
    raw_compute = _value(container, names.compute)
    if raw_count is None and raw_memory is None and raw_percent is None and raw_compute is None:
        return None
    # HAMi's webhook adds one device when only memory or compute is given (defaultGPUNum).
    count = (
        1
        if raw_count is None
        else _integer(
            raw_count,
            names.count,
            who,
            MAX_DEVICE_COUNT,
            f"no node has more devices; ask for at most {MAX_DEVICE_COUNT}",
        )
    )
    if count == 0:
        return None
    if count < 0:
        raise ValueError(f"{who}: {names.count} must be at least 1, got {shown(raw_count)}")
    memory_mib = None
    if raw_memory is not None:
        unit = vendor.memory_unit_mib
        most_units = MAX_DEVICE_MEMORY_MIB // unit
        advice = (
            f"no device has more than {MAX_DEVICE_MEMORY_MIB:,} MiB (16 TiB) of memory; ask for "
            f"at most {most_units:,}" + (f" (units of {unit} MiB)" if unit != 1 else " (MiB)")
        )
        # A value with a unit suffix ("4Gi") may mean bytes to a vendor that reads it so in
        # a wrapper of this hook (MetaX, HAMi's rule): only a bare number is known here to be
        # a count of memory units. The plugin host bounds the final request for every vendor.
        memory = _integer(
            raw_memory,
            str(names.memory),
            who,
            MAX_QUANTITY if has_unit(raw_memory) else most_units,
            advice,
        )
        if memory < 0:
            raise ValueError(f"{who}: {names.memory} must be >= 0, got {shown(raw_memory)}")
        # 0 is as if not given, as in HAMi: booking 0 MiB would hand HAMi-core a limit of
        # 0, which it reads as "no limit" (the whole device, unbooked).
        memory_mib = memory * vendor.memory_unit_mib or None
    memory_percent = None
    if raw_percent is not None:
        memory_percent = _integer(
            raw_percent, str(names.memory_percent), who, advice="ask for 1 to 100 (percent)"
        )
        if memory_percent < 0:
            raise ValueError(
                f"{who}: {names.memory_percent} must be between 1 and 100, got {shown(raw_percent)}"
            )
        # HAMi's rules: above 100 is 100; 0 is as if not given.
        memory_percent = min(memory_percent, MAX_PERCENT) or None
    if memory_mib is not None and memory_percent is not None:
        raise ValueError(
            f"{who}: asks memory both as {names.memory} and as {names.memory_percent}; "
            "keep one of them"
        )
    if memory_mib is None and memory_percent is None and vendor.default_memory_mib:
        memory_mib = vendor.default_memory_mib  # HAMi's defaultMemory
    compute = vendor.default_compute_percent  # HAMi's defaultCores
    if raw_compute is not None:
        compute = _integer(
            raw_compute,
            str(names.compute),
            who,
            advice="compute is a percent of each device: ask for 0 to 100",
        )
        if compute < 0:
            raise ValueError(
                f"{who}: {names.compute} is a percent of each device, 0 to 100, "
                f"got {shown(raw_compute)}"
            )
        compute = min(compute, MAX_PERCENT)  # HAMi clamps it
    domain = names.count.split("/", 1)[0]
    ann = pod.annotations

    def keys(ours: str, hami: Sequence[str]) -> list[str]:
        return [ours, *(f"{domain}/{k}" for k in hami)]

    return ContainerRequest(
        vendor=vendor.name,
        container=container.name,
        count=count,
        memory_mib=memory_mib,
        memory_percent=memory_percent,
        compute_percent=compute,
        exclusive=compute == 100,
        models_include=_list(ann, keys(USE_MODEL, _HAMI_USE_MODEL)),
        models_exclude=_list(ann, keys(NOUSE_MODEL, _HAMI_NOUSE_MODEL)),
        uuids_include=_list(ann, keys(USE_UUID, _HAMI_USE_UUID)),
        uuids_exclude=_list(ann, keys(NOUSE_UUID, _HAMI_NOUSE_UUID)),
        numa_bind=_flag(ann, keys(NUMA_BIND, _HAMI_NUMA_BIND), who),
    )


def _number(raw: str | None) -> int | None:
    """*raw* as a whole number, ``None`` if it is none (the parser explains those)."""
    if raw is None:
        return None
    try:
        value = parse_quantity(raw)
    except ValueError:
        return None
    return int(value) if value == value.to_integral_value() else None


def hami_leniencies(vendor: VendorSpec, pod: PodView, container: ContainerView) -> list[str]:
    """What :func:`xpushare_resource_request` took differently from what *container* wrote,
    as HAMi does, one sentence each (the webhook's admission warnings)."""
    names = vendor.resource_names
    who = _who(pod, container)
    out: list[str] = []
    compute = _number(_value(container, names.compute))
    total = vendor.compute_total
    if compute is not None and compute > total:
        out.append(
            f"{who}: {names.compute} {compute} is above a whole device ({total}); taken as "
            f"{total} (all of the device's compute: the device exclusively unless its compute "
            "is over-committed), as HAMi clamps it to the device's total"
        )
    if _number(_value(container, names.memory)) == 0:
        out.append(
            f"{who}: {names.memory} 0 is taken as not given, as HAMi does (the container gets "
            "the memory of a request without one, not an unlimited share)"
        )
    percent = _number(_value(container, names.memory_percent))
    if percent is not None and percent > MAX_PERCENT:
        out.append(
            f"{who}: {names.memory_percent} {percent} is above 100 %; taken as 100, as HAMi does"
        )
    elif percent == 0:
        out.append(
            f"{who}: {names.memory_percent} 0 is ignored, as HAMi ignores it (the container "
            "gets the memory of a request without one)"
        )
    domain = names.count.split("/", 1)[0]
    for key in (f"{domain}/{k}" for k in _HAMI_NUMA_BIND):
        raw = pod.annotations.get(key) if key != NUMA_BIND else None  # ours is strict
        if raw is not None and raw not in _GO_TRUE and raw not in _GO_FALSE:
            out.append(
                f"pod {pod.ref}: annotation {key} {shown(raw)} is not a boolean; taken as false "
                "(no NUMA binding), as HAMi does: write 'true' or 'false'"
            )
    return out


@hookimpl(trylast=True)
def xpushare_fit(
    request: ContainerRequest,
    node: NodeView,
    usage: Mapping[str, DeviceUsage],
    device_order: Sequence[str],
    memory_overcommit: float,
) -> FitResult:
    return default_fit(request, node, usage, device_order, memory_overcommit)


@hookimpl(trylast=True)
def xpushare_register_policies(register: Callable[[str, Any], None]) -> None:
    for name, factory in builtin_policies():
        register(name, factory)

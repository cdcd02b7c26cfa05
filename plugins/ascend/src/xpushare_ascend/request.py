"""Reading what a container asks of Ascend, in HAMi's terms, and rounding it to a template.

Why the Ascend vendor parses its own requests: HAMi's Ascend resources differ from the
GPU-like default (hami-protocol.md §8.2). A memory request is a *hard split*: it is rounded
up to the smallest vNPU template of the chip family that holds it (or to a whole chip when
it is larger than every template but fits the chip), and one the family cannot hold is
refused with the templates listed; a request for several NPUs must be whole NPUs; and on
910C super-pod modules whole NPUs come in pairs. Doing it here means the webhook refuses an
impossible pod at admission, and the scheduler sees the template the pod will really get.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Final

from xpushare.models import ContainerRequest

if TYPE_CHECKING:
    from collections.abc import Mapping

    from xpushare.models import ContainerView, PodView
    from xpushare_ascend.config import AscendConfig, ChipSpec, Template

#: Any HAMi Ascend resource (huawei.com/Ascend910B3, ...-memory, ...-core).
_ASCEND_RESOURCE: Final = re.compile(r"^huawei\.com/Ascend[0-9A-Za-z-]+$")
#: HAMi's per-chip device-selection annotations (hami-protocol.md §8.1).
USE_UUID: Final = "hami.io/use-{word}-uuid"
NO_USE_UUID: Final = "hami.io/no-use-{word}-uuid"
#: HAMi's pod annotation asking for its soft split (hami-core vNPU mode).
VNPU_MODE_ANNOTATION: Final = "huawei.com/vnpu-mode"


def _limits(container: ContainerView) -> Mapping[str, str]:
    # Extended resources are given as limits (requests default to them); read requests too
    # for the rare spec that sets only those.
    return {**container.requests, **container.limits}


#: Digits of the largest Kubernetes quantity, 2^63-1: longer text is refused unread.
_MAX_DIGITS: Final = 19


def _whole(name: str, value: str, what: str) -> int:
    text = str(value).strip()
    if not text.isdigit():
        raise ValueError(f"{name} must be a whole number of {what}, got {value!r}")
    if len(text) > _MAX_DIGITS or int(text) > 2**63 - 1:
        raise ValueError(
            f"{name} is {text[:24]!r}{'...' if len(text) > 24 else ''}, larger than any "
            f"Kubernetes quantity (at most 2^63-1); ask for a number of {what} a chip can hold"
        )
    return int(text)


def _ids(annotations: Mapping[str, str], key: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in annotations.get(key, "").split(",") if x.strip())


def smallest_template(family: ChipSpec, memory_mib: int) -> Template | None:
    """The smallest template holding *memory_mib* (fewest AI cores among equal memory)."""
    fitting = [t for t in family.templates if t.memory_mib >= memory_mib]
    return min(fitting, key=lambda t: (t.memory_mib, t.ai_core), default=None)


def template_percent(family: ChipSpec, template: Template) -> int:
    return min(100, math.ceil(100 * template.ai_core / family.ai_core))


def parse(
    config: AscendConfig, vendor: str, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    """The container's Ascend request, or ``None`` when it asks for none.

    :raises ValueError: the request is invalid or no chip of the family can hold it; the
        message says what to ask for instead.
    """
    names = config.names()
    limits = _limits(container)
    family = config.served
    ours = {k: v for k, v in limits.items() if k in names.all()}
    foreign = sorted(k for k in limits if _ASCEND_RESOURCE.match(k) and k not in ours)
    if foreign:
        raise ValueError(
            f"container {container.name!r} asks for {', '.join(foreign)}, but this cluster "
            f"serves Ascend {family.chip_name} NPUs as {names.count} (and {names.memory}); "
            f"ask for those, or set the ascend vendor's `chip` config to your chip family"
        )
    if not ours:
        return None
    if names.compute and names.compute in ours:
        raise ValueError(
            f"container {container.name!r} asks for {names.compute}, HAMi's soft split "
            "(hami-core vNPU mode), which xpushare's Ascend plugin does not support yet; ask "
            f"for {names.memory} (a vNPU template) or for whole NPUs with {names.count}"
        )
    if pod.annotations.get(VNPU_MODE_ANNOTATION) == "hami-core":
        raise ValueError(
            f"pod {pod.ref} sets {VNPU_MODE_ANNOTATION}: hami-core (soft split), which "
            "xpushare's Ascend plugin does not support yet; remove the annotation to get "
            "vNPU templates (hard split) or whole NPUs"
        )
    count = _whole(names.count, ours[names.count], "NPUs") if names.count in ours else 1
    if count == 0:
        return None  # HAMi's reading of a zero count: no NPU wanted
    word = family.common_word
    common = {
        "vendor": vendor,
        "container": container.name,
        "models_include": (word,),
        "uuids_include": _ids(pod.annotations, USE_UUID.format(word=word)),
        "uuids_exclude": _ids(pod.annotations, NO_USE_UUID.format(word=word)),
    }
    memory = None
    if names.memory and names.memory in ours:
        memory = _whole(names.memory, ours[names.memory], "memory units") * config.memory_factor
    if memory is not None:
        if count > 1:
            raise ValueError(
                f"container {container.name!r} asks for {count} NPUs with {names.memory}: a "
                "request for several NPUs takes whole NPUs; drop the memory limit, or ask for "
                "one NPU"
            )
        template = smallest_template(family, memory)
        if template is not None:
            return ContainerRequest(
                **common,
                count=1,
                memory_mib=template.memory_mib,
                compute_percent=template_percent(family, template),
                partition=template.name,
            )
        if memory > family.memory_capacity_mib:
            offered = ", ".join(f"{t.name} ({t.memory_mib} MiB)" for t in family.templates)
            raise ValueError(
                f"container {container.name!r} asks for {memory} MiB of Ascend "
                f"{family.chip_name} memory, more than one NPU has "
                f"({family.memory_capacity_mib} MiB); the vNPU templates are: "
                f"{offered or 'none'}; ask for at most that, or for whole NPUs"
            )
    if family.super_pod:
        count = _module_count(family, container.name, count)
    return ContainerRequest(**common, count=count, exclusive=True, compute_percent=100)


def _module_count(family: ChipSpec, container: str, count: int) -> int:
    """910C NPUs are two dies per module, served whole: 1 means a module, so 2 dies."""
    if count == 1:
        return 2
    if count % 2:
        raise ValueError(
            f"container {container!r} asks for {count} Ascend {family.chip_name} NPUs; "
            "super-pod modules hold two NPUs each, so ask for 1 (one module) or an even number"
        )
    return count


def escape(name: str) -> str:
    """A resource name as one JSON-pointer segment (RFC 6901: ~ then /)."""
    return name.replace("~", "~0").replace("/", "~1")

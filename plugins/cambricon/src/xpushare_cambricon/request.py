"""HAMi's meaning of a Cambricon request, on top of the core's parsing.

Why a wrapper around the core's parser: the core already reads the vendor's resource names
(count, memory in ``memory_unit_mib`` units, compute percent) and the constraint annotations,
ours and HAMi's ``cambricon.com/use-gpuuuid`` family. What differs for Cambricon
(hami-protocol.md §8.2) is applied here: the compute share (``mlu.smlu.vcore``) defaults to
100 %, so a pod that gives none takes whole cards, as under HAMi; a share is a slice of one
card, so several cards are whole cards; HAMi's ``cambricon.com/use-mlutype`` names models;
and an sMLU needs a compute quota of at least 1 %.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

    from xpushare.models import ContainerRequest, ContainerView, PodView, VendorSpec
    from xpushare_cambricon.config import CambriconConfig

USE_TYPE: Final = "cambricon.com/use-mlutype"
NOUSE_TYPE: Final = "cambricon.com/nouse-mlutype"


def _given(container: ContainerView, name: str | None) -> bool:
    return name is not None and (name in container.limits or name in container.requests)


def _list(annotations: Mapping[str, str], key: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in annotations.get(key, "").split(",") if x.strip())


def adjust(
    config: CambriconConfig,
    vendor: VendorSpec,
    pod: PodView,
    container: ContainerView,
    parsed: ContainerRequest | None,
) -> ContainerRequest | None:
    """The core's parse of *container*, with Cambricon's rules applied.

    :raises ValueError: the request cannot be served; the message says what to ask instead.
    """
    if parsed is None:
        return None
    names = vendor.resource_names
    who = f"pod {pod.ref}, container {container.name!r}"
    update: dict[str, object] = {}
    include = _list(pod.annotations, USE_TYPE)
    exclude = _list(pod.annotations, NOUSE_TYPE)
    if include:
        update["models_include"] = tuple(dict.fromkeys((*parsed.models_include, *include)))
    if exclude:
        update["models_exclude"] = tuple(dict.fromkeys((*parsed.models_exclude, *exclude)))
    compute = parsed.compute_percent if _given(container, names.compute) else 100
    if compute >= 100:
        # Whole cards: memory is the card's, compute all of it.
        update.update(compute_percent=100, exclusive=True, memory_mib=None, memory_percent=None)
        return parsed.model_copy(update=update)
    if config.share_mode == "none":
        raise ValueError(
            f"{who}: asks for {compute}% of an MLU ({names.compute}), but this cluster serves "
            "whole MLUs only (cambricon share_mode: none); drop the share resources"
        )
    if parsed.count > 1:
        raise ValueError(
            f"{who}: asks for a share of {parsed.count} MLUs; a share is part of one MLU, so "
            f"several MLUs are whole MLUs: drop {names.compute} and {names.memory}, or ask "
            "for one"
        )
    if compute < 1 and config.share_mode == "smlu":
        raise ValueError(
            f"{who}: {names.compute} is 0; an sMLU needs a compute quota of 1 to 100 percent"
        )
    update["compute_percent"] = compute
    return parsed.model_copy(update=update)

"""Iluvatar's request rules on top of the core parser, and its admission patch.

HAMi (hami-protocol.md §8.2): cores default to 0 and memory to the whole GPU, as the core
already does; a container asking for more than one GPU gets them whole (the webhook sets
``vCore = count * 100``); and the webhook gives each such container the environment variable
``SOL_CONTINER_NAME`` (HAMi's spelling) with its own name.
"""

from __future__ import annotations

from xpushare.models import ContainerRequest, ContainerView, JsonPatchOp, PodView
from xpushare_others.common.requests import whole_devices

CONTAINER_NAME_ENV = "SOL_CONTINER_NAME"


def adjust(request: ContainerRequest | None) -> ContainerRequest | None:
    if request is not None and request.count > 1:
        return whole_devices(request)
    return request


def container_name_env(container: ContainerView, index: int) -> list[JsonPatchOp]:
    if container.env.get(CONTAINER_NAME_ENV) == container.name:
        return []
    kind = "initContainers" if container.init else "containers"
    entry = {"name": CONTAINER_NAME_ENV, "value": container.name}
    if not container.env:
        return [JsonPatchOp(op="add", path=f"/spec/{kind}/{index}/env", value=[entry])]
    return [JsonPatchOp(op="add", path=f"/spec/{kind}/{index}/env/-", value=entry)]


def admission(pod: PodView, container: ContainerView, index: int) -> list[JsonPatchOp]:
    return container_name_env(container, index)

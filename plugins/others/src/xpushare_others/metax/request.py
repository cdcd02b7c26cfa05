"""MetaX request rules on top of the core parser, and HAMi's sGPU QoS annotations.

HAMi (hami-protocol.md §8.1 and §8.2): in whole-GPU mode a container gets whole GPUs; in sGPU mode
cores default to 100 and memory to the whole GPU, and ``metax-tech.com/vmemory`` is GiB when
bare but bytes when it carries a unit (``4Gi``). The webhook validates the pod's QoS policy
``metax-tech.com/sgpu-qos-policy`` (``best-effort``, the default it writes, ``fixed-share``
or ``burst-share``) and app class ``metax-tech.com/sgpu-app-class`` (``online`` or
``offline``, one sGPU per container only), so HAMi users' pods keep the annotations they
rely on. A pod's app class and QoS policy travel to the fit as its request's mode
(:mod:`~xpushare_others.metax.tags`); an ``online`` pod gets no QoS default, as in HAMi, and
a pod that came past the webhook without a policy is best-effort, the one it would have got.
"""

from __future__ import annotations

from typing import Final

from xpushare.errors import AdmissionDenied
from xpushare.models import ContainerRequest, ContainerView, JsonPatchOp, PodView, VendorSpec
from xpushare_others.common import settings
from xpushare_others.common.requests import (
    bytes_mib,
    raw_value,
    who,
    whole_devices,
    with_compute,
)
from xpushare_others.metax.config import VENDOR, MetaxConfig
from xpushare_others.metax.tags import APP_CLASSES, BEST_EFFORT, ONLINE, QOS_POLICIES, SgpuTag

QOS_KEY: Final = "metax-tech.com/sgpu-qos-policy"
QOS_DEFAULT: Final = BEST_EFFORT
APP_CLASS_KEY: Final = "metax-tech.com/sgpu-app-class"
#: Characters of a refused annotation value quoted back (an annotation may be 256 KiB).
QUOTED_CHARS: Final = 64
DOMAIN: Final = "metax-tech.com/"


def adjust(
    request: ContainerRequest | None, vendor: VendorSpec, pod: PodView, container: ContainerView
) -> ContainerRequest | None:
    if request is None:
        return None
    config = settings.cached(MetaxConfig, VENDOR, vendor.config)
    if config.mode == "gpu":
        return whole_devices(request)
    names = vendor.resource_names
    raw_memory = raw_value(container, names.memory)
    if raw_memory is not None:
        mib = bytes_mib(raw_memory, f"{who(pod, container)}: {DOMAIN}vmemory")
        if mib is not None:
            request = request.model_copy(update={"memory_mib": mib})
    if raw_value(container, names.compute) is None:
        request = with_compute(request, 100)
    app = pod.annotations.get(APP_CLASS_KEY)
    if app is not None and app not in APP_CLASSES:
        raise ValueError(_bad_class(pod, app))
    qos = pod.annotations.get(QOS_KEY, QOS_DEFAULT)
    if app != ONLINE and qos not in QOS_POLICIES:
        raise ValueError(_bad_qos(pod, qos))
    mode = SgpuTag(app, qos if app != ONLINE else QOS_DEFAULT).render()
    if mode is not None:
        request = request.model_copy(update={"mode": mode})
    return request


def _bad_qos(pod: PodView, qos: str) -> str:
    return (
        f"pod {pod.ref}: annotation {QOS_KEY}={qos[:QUOTED_CHARS]!r} is not one of "
        f"{', '.join(QOS_POLICIES)}"
    )


def _bad_class(pod: PodView, app: str) -> str:
    return (
        f"pod {pod.ref}: annotation {APP_CLASS_KEY}={app[:QUOTED_CHARS]!r} is not one of "
        f"{', '.join(APP_CLASSES)}"
    )


def _wants_metax(container: ContainerView) -> bool:
    return any(k.startswith(DOMAIN) for k in (*container.limits, *container.requests))


def admission(
    pod: PodView, container: ContainerView, request: ContainerRequest
) -> list[JsonPatchOp]:
    """Validate the QoS annotations; default the policy once per pod (first MetaX container)."""
    qos = pod.annotations.get(QOS_KEY)
    if qos is not None and qos not in QOS_POLICIES:
        raise AdmissionDenied(_bad_qos(pod, qos))
    app = pod.annotations.get(APP_CLASS_KEY)
    if app is not None:
        if app not in APP_CLASSES:
            raise AdmissionDenied(_bad_class(pod, app))
        if request.count != 1:
            raise AdmissionDenied(
                f"pod {pod.ref}, container {container.name!r}: {APP_CLASS_KEY} applies to one "
                f"sGPU, the container asks for {request.count}"
            )
    if qos is not None or request.exclusive or app == ONLINE:
        return []
    first = next((c for c in pod.containers if _wants_metax(c)), None)
    if first is not None and first.name != container.name:
        return []
    if not pod.annotations:
        return [JsonPatchOp(op="add", path="/metadata/annotations", value={QOS_KEY: QOS_DEFAULT})]
    pointer = QOS_KEY.replace("~", "~0").replace("/", "~1")
    return [JsonPatchOp(op="add", path=f"/metadata/annotations/{pointer}", value=QOS_DEFAULT)]

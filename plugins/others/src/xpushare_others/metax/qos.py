"""HAMi's sGPU QoS compatibility (``metax-tech.com/sgpu-qos-policy``) in the MetaX fit.

A MetaX GPU runs its shared slices under one QoS policy (``best-effort``, ``fixed-share`` or
``burst-share``), so HAMi's Metax-SGPU filter (``checkDeviceQos`` in HAMi's
pkg/device/metax/sdevice.go) lets a pod onto a GPU only when the GPU is idle, or the pod
asks for all its compute (HAMi's exclusive ``cores: 100``, which sets the GPU's policy
anew), or the pods on it run under the pod's own policy. ``online`` pods neither are checked
nor count (HAMi skips them). HAMi reads a GPU's policy from what MetaX's device plugin
reports, updated by the pods it places; here it is the policies the GPU's slices are booked
under (:mod:`xpushare_others.metax.tags`), every one of which must match: a GPU HAMi left
with pods of two policies takes neither (HAMi would compare with whichever it saw last).
"""

from __future__ import annotations

from xpushare.models import ContainerRequest, DeviceUsage
from xpushare_others.metax.tags import ONLINE, SgpuTag, slice_tags


def policies(u: DeviceUsage | None) -> set[str]:
    """The QoS policies of the slices on one device (online ones left out).

    Slots used beyond the device's tags (unclassed best-effort pods, pods HAMi placed) are
    best-effort: the tag grammar leaves the default unwritten.
    """
    if u is None or u.used_slots == 0:
        return set()
    tags = slice_tags(u.partitions_in_use)
    found = {t.qos for t in tags if t.app_class != ONLINE}
    if u.used_slots > len(tags):
        found.add(SgpuTag().qos)
    return found


def admits(request: ContainerRequest, tag: SgpuTag, u: DeviceUsage | None) -> bool:
    """HAMi's ``checkDeviceQos``: may a pod with *tag* join this GPU."""
    if u is None or u.used_slots == 0 or tag.app_class == ONLINE:
        return True
    if request.effective_compute >= 100:
        return True  # the whole GPU's compute: no one else shares it to keep a policy for
    return policies(u) <= {tag.qos}

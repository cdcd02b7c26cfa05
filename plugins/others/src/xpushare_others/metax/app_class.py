"""HAMi's sGPU application classes (``metax-tech.com/sgpu-app-class``) in the MetaX fit.

HAMi's Metax-SGPU candidate filter (hami-protocol.md §8.2, ``checkAppClass`` in HAMi's
pkg/device/metax/sdevice.go) keeps classed and unclassed pods apart: an idle GPU takes any
pod; a GPU in use takes a pod with a class (``online`` or ``offline``) only when it already
runs a classed pod, and a pod without one only when it runs no classed pod; an ``offline``
pod never joins a GPU running an ``online`` one (MetaX suspends offline work there). HAMi
knows a GPU's classes from the annotations of the pods on it; here they come from the tags
its slices are booked under (:mod:`xpushare_others.metax.tags`), and a GPU's slots used
beyond its classed tags are unclassed pods'.

An ``online`` pod books no compute and skips HAMi's compute checks (HAMi sets its cores to 0),
and among the GPUs that fit it prefers, as HAMi's ``prioritizeOnlineDevices`` does, GPUs
not running offline work alone, then fewer online pods, then fewer offline pods; ties keep
the placement policy's order.
"""

from __future__ import annotations

from typing import Final

from xpushare.models import DeviceUsage
from xpushare_others.metax.tags import OFFLINE, ONLINE, SgpuTag, slice_tags

#: The request mode (``ContainerRequest.mode``) of a pod with only a class, per class.
CLASS_MODES: Final = {c: SgpuTag(c).render() or "" for c in (ONLINE, OFFLINE)}


def classes(u: DeviceUsage | None) -> tuple[int, int]:
    """(online slices, offline slices) on one device."""
    if u is None or not u.partitions_in_use:
        return 0, 0
    tags = slice_tags(u.partitions_in_use)
    online = sum(1 for t in tags if t.app_class == ONLINE)
    offline = sum(1 for t in tags if t.app_class == OFFLINE)
    return online, offline


def admits(requested: str | None, u: DeviceUsage | None) -> bool:
    """HAMi's ``checkAppClass``: may a pod of class *requested* (None: none) join this GPU."""
    if u is None or u.used_slots == 0:
        return True
    online, offline = classes(u)
    classed = online + offline > 0
    if classed != (requested is not None):
        return False
    return not (online > 0 and requested == OFFLINE)


def online_rank(u: DeviceUsage | None) -> tuple[int, int, int]:
    """HAMi's ``prioritizeOnlineDevices`` order as a key: smaller is tried first."""
    online, offline = classes(u)
    only_offline = online == 0 and offline > 0
    return (1 if only_offline else 0, online, offline)

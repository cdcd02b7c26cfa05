"""HAMi's MetaX node score for ``online`` pods (``scoreOnlineDevices``), in [0, 1].

HAMi's Metax-SGPU ``ScoreNode`` (HAMi's pkg/device/metax/sdevice.go) rates a node for an
``online`` pod by the GPUs the pod would get: -100 per offline pod on a GPU running offline
work only, else -20 per online pod and -2 per offline pod, counted before the pod joins;
higher is better, whatever the node policy (HAMi calls it policy-neutral). The score hook
is a preference in [0, 1], so the penalty ``p`` is given as ``100 / (100 + p)``: 1 for idle
GPUs, 0.83 beside one online pod, 0.5 beside one offline pod alone; the order of nodes is
HAMi's. The GPUs rated are the ones this plugin's fit picks on the node (the core passes the
picks of its own walk). Other pods get no score (HAMi's is 0 for them), as do exclusive
requests: HAMi's MetaLink-zone score needs link zones the MetaX inventory does not carry.

The placement engine blends the score into the policy's by ``vendor_score_weight``; HAMi
weighs its device scores 10,000 times the node score, so a weight near 1 reproduces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from xpushare.models import ContainerRequest, DeviceUsage, FitResult, NodeView
from xpushare_others.metax import app_class, fit
from xpushare_others.metax.tags import ONLINE

#: HAMi's points (scoreOnlineDevices): per offline pod on a GPU with no online pod, per
#: online pod, per offline pod beside online ones.
OFFLINE_ALONE: Final = 100
ONLINE_POD: Final = 20
OFFLINE_BESIDE: Final = 2


def penalty(u: DeviceUsage | None) -> int:
    """HAMi's score of one GPU for an online pod, negated (0: nothing on it)."""
    online, offline = app_class.classes(u)
    if offline and not online:
        return OFFLINE_ALONE * offline
    return ONLINE_POD * online + OFFLINE_BESIDE * offline


def score(
    request: ContainerRequest, node: NodeView, usage: Mapping[str, DeviceUsage]
) -> float | None:
    """The node's preference for an ``online`` request in [0, 1]; ``None`` for other pods
    or where the plugin's fit gives the pod nothing here."""
    if fit.request_tag(request).app_class != ONLINE:
        return None
    mine = fit.fit(request, node, usage, [d.id for d in node.devices], 1.0)
    if mine is None or not mine.fits:
        return None
    chosen = dict.fromkeys(s.device_id for s in mine.devices)
    points = sum(penalty(usage.get(i)) for i in chosen)
    return 100 / (100 + points)


def hook_score(
    request: ContainerRequest, node: NodeView, result: FitResult, usage: Mapping[str, DeviceUsage]
) -> float | None:
    """``xpushare_score``: *result* (the core's picks) is not used, see :func:`score`."""
    if not result.fits:
        return None
    return score(request, node, usage)

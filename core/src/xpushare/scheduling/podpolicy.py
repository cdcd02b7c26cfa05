"""A pod's own choice of placement policy: HAMi's per-pod policy annotations.

HAMi v2.10 lets a pod override the cluster's policies (research/hami-protocol.md §3.5-3.6):

* ``hami.io/node-scheduler-policy``: which node wins (``binpack`` or ``spread``). xpushare
  also takes the name of any registered policy here (``best-fit``, ``fgd``, ``fgd-cpu``, a
  plugin's), so its own policies are chosen per pod the same way;
* ``hami.io/gpu-scheduler-policy``: the order the node's devices are tried in, ``binpack``,
  ``spread``, ``numa``, ``topology-aware`` or ``mutex``, or a comma chain of them
  (``mutex,binpack,numa``) whose sort keys apply in the order written; ``mutex`` also keeps
  the pod off any device another container already uses;
* ``hami.io/device-scoring-weights``: ``slot=<int>,core=<int>,memory=<int>``, the weights of
  the three terms of HAMi's device score that ``binpack``/``spread`` sort by.

Parsing is bounded (a value longer than :data:`MAX_VALUE_CHARS` is refused before it is
split) and never fails on what HAMi accepts: an unknown token is ignored as HAMi ignores it,
and the webhook says so in an admission warning (:func:`policy_warnings`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Final

# Re-exported: callers have always found the pod's choice and HAMi's tokens here.
from xpushare.scheduling.podchoice import BINPACK as BINPACK
from xpushare.scheduling.podchoice import GPU_TOKENS as GPU_TOKENS
from xpushare.scheduling.podchoice import MUTEX as MUTEX
from xpushare.scheduling.podchoice import NUMA as NUMA
from xpushare.scheduling.podchoice import SPREAD as SPREAD
from xpushare.scheduling.podchoice import TOPOLOGY as TOPOLOGY
from xpushare.scheduling.podchoice import PodPolicy as PodPolicy

if TYPE_CHECKING:
    from xpushare.scheduling.request import Demand
    from xpushare.scheduling.state import DeviceState, DeviceTable, NodeState

NODE_POLICY_KEY: Final = "hami.io/node-scheduler-policy"
GPU_POLICY_KEY: Final = "hami.io/gpu-scheduler-policy"
WEIGHTS_KEY: Final = "hami.io/device-scoring-weights"

#: Longest value read from any of the three annotations. HAMi's longest meaningful value is
#: a chain of its five tokens (``mutex,topology-aware,binpack,spread,numa``: 40 characters)
#: or three weights of 19 digits (``slot=...,core=...,memory=...``: 75).
MAX_VALUE_CHARS: Final = 256
#: Largest weight taken: HAMi reads an int64; a weight this large already makes its term
#: the only one that counts, and keeps the score arithmetic in exact float range.
MAX_WEIGHT: Final = 1_000_000

#: The node policies HAMi knows; any other value is binpack there (node_policy.go, Less).
HAMI_NODE_POLICIES: Final = (BINPACK, SPREAD)
#: HAMi's equal weights (util.DefaultDeviceScoringWeights) and its score scale (util.Weight).
DEFAULT_WEIGHTS: Final = (1, 1, 1)
SCORE_SCALE: Final = 10.0


def _bounded(key: str, value: str) -> str:
    if len(value) > MAX_VALUE_CHARS:
        raise ValueError(
            f"annotation {key} is {len(value)} characters long; at most {MAX_VALUE_CHARS} are "
            "read (HAMi's longest meaningful value is a chain of its five GPU policies)"
        )
    return value.strip()


def parse_weights(value: str) -> tuple[int, int, int]:
    """``slot=<int>,core=<int>,memory=<int>`` as HAMi checks it; ``ValueError`` says why.

    HAMi fails the pod's whole ``/filter`` on a malformed value; xpushare refuses it with
    the same rule, at admission, naming the annotation.
    """
    text = _bounded(WEIGHTS_KEY, value)
    want = "give exactly slot=<int>,core=<int>,memory=<int>, e.g. slot=1,core=1,memory=2"
    parts = text.split(",")
    if len(parts) != 3:
        raise ValueError(f"annotation {WEIGHTS_KEY} {text!r}: {want}")
    found: dict[str, int] = {}
    for part in parts:
        name, sep, number = part.strip().partition("=")
        name, number = name.strip(), number.strip()
        if not sep or name not in ("slot", "core", "memory"):
            raise ValueError(f"annotation {WEIGHTS_KEY} {text!r}: {name!r} is not a weight; {want}")
        if name in found:
            raise ValueError(f"annotation {WEIGHTS_KEY} {text!r}: {name} is given twice; {want}")
        digits = number[1:] if number[:1] in "+-" else number
        if not digits.isdigit() or not digits.isascii() or len(digits) > 19:
            raise ValueError(f"annotation {WEIGHTS_KEY} {text!r}: {name} must be an integer")
        weight = int(number)
        if weight < 0:
            raise ValueError(f"annotation {WEIGHTS_KEY} {text!r}: {name} must not be negative")
        if weight > MAX_WEIGHT:
            raise ValueError(
                f"annotation {WEIGHTS_KEY} {text!r}: {name} is above {MAX_WEIGHT:,}; scale the "
                "three weights down together (only their ratios matter)"
            )
        found[name] = weight
    if not any(found.values()):
        raise ValueError(f"annotation {WEIGHTS_KEY} {text!r}: at least one weight must be > 0")
    return found["slot"], found["core"], found["memory"]


def _gpu_policy(value: str) -> str:
    """The GPU policy with spaces around tokens and empty tokens dropped; a value with a
    comma stays a chain (``binpack,`` sorts as HAMi's chain of one key, not as ``binpack``)."""
    text = _bounded(GPU_POLICY_KEY, value)
    if "," not in text:
        return text
    chain = ",".join(t for t in (p.strip() for p in text.split(",")) if t)
    return chain if "," in chain else chain + ","


def pod_policy(annotations: Mapping[str, str]) -> PodPolicy | None:
    """The pod's policy choice, or ``None`` when its annotations choose nothing.

    ``ValueError`` only for a malformed ``hami.io/device-scoring-weights`` or a value over
    :data:`MAX_VALUE_CHARS` (HAMi fails the pod on the first; the second cannot be meant).
    """
    node = annotations.get(NODE_POLICY_KEY)
    gpu = annotations.get(GPU_POLICY_KEY)
    weights = annotations.get(WEIGHTS_KEY)
    if node is None and gpu is None and weights is None:
        return None
    return PodPolicy(
        node=_bounded(NODE_POLICY_KEY, node) if node is not None else None,
        device=_gpu_policy(gpu) if gpu is not None else None,
        weights=parse_weights(weights) if weights is not None else None,
    )


def policy_warnings(annotations: Mapping[str, str], known: Collection[str]) -> list[str]:
    """What the webhook tells the pod's author about its policy annotations.

    *known*: the registered policy names. ``ValueError`` as :func:`pod_policy`.
    """
    choice = pod_policy(annotations)
    if choice is None:
        return []
    out: list[str] = []
    if choice.node is not None and choice.node not in known:
        out.append(
            f"annotation {NODE_POLICY_KEY} {choice.node!r} names no policy (known: "
            f"{', '.join(sorted(known))}); the node policy is binpack, as in HAMi"
        )
    if choice.device is not None:
        unknown = [t for t in choice.device.split(",") if t and t not in GPU_TOKENS]
        if unknown:
            out.append(
                f"annotation {GPU_POLICY_KEY}: {', '.join(map(repr, unknown))} ignored, as "
                f"HAMi ignores them (known: {', '.join(GPU_TOKENS)})"
            )
    return out


# -- HAMi's device order -------------------------------------------------------------------------


def device_score(
    d: DeviceState, demand: Demand | None, weights: tuple[int, int, int] = DEFAULT_WEIGHTS
) -> float:
    """HAMi's device score (gpu_policy.go ComputeScore): how full *d* is with *demand* on it
    (``None``: as it is).

    ``10 x (w_slot x (1 + used)/slots + w_core x (compute + used)/cap + w_mem x (mem +
    used)/cap)``; 0 for a device without slots, compute or memory, as there.
    """
    if not d.slots or not d.compute_cap or not d.memory_cap:
        return 0.0
    slot, core, memory = weights
    asked, compute, mib = (
        (1, demand.compute, demand.memory_for(d.memory_mib)) if demand is not None else (0, 0, 0)
    )
    return SCORE_SCALE * (
        slot * (asked + d.used_slots) / d.slots
        + core * (compute + d.used_compute) / d.compute_cap
        + memory * (mib + d.used_memory) / d.memory_cap
    )


class HamiDeviceOrder:
    """The order HAMi tries a node's devices in under one GPU policy (a callable order).

    HAMi sorts the devices ascending by its ``Less`` and its ``Fit`` walks the list from
    the end, so the device tried first is the largest under that key: here the same key,
    sorted descending. Its sort is stable on the few devices of a node, so equal devices
    keep their inventory order and the walk from the end meets the highest index first;
    the index, last in the key, gives that.
    """

    __slots__ = ("chain", "chained", "policy", "weights")

    def __init__(self, policy: str, weights: tuple[int, int, int] | None = None) -> None:
        self.policy = policy
        self.weights = weights or DEFAULT_WEIGHTS
        # A comma list, or a bare "numa", is a chain of sort keys (gpu_policy.go Less).
        self.chained = "," in policy or policy == NUMA
        tokens = policy.split(",")
        self.chain = tuple(dict.fromkeys(t for t in tokens if t in (BINPACK, SPREAD, NUMA)))

    def __call__(
        self, node: NodeState, table: DeviceTable, demand: Demand
    ) -> Sequence[DeviceState]:
        weights = self.weights
        numa_bind = demand.numa_bind
        keys = []
        for d in table.devices:
            score = device_score(d, demand, weights)
            numa = d.numa if d.numa is not None and d.numa > 0 else 0
            keys.append((self.sort_key(score, numa, d.used_slots, numa_bind), d.index, d))
        keys.sort(key=lambda k: (k[0], k[1]), reverse=True)
        return [k[2] for k in keys]

    def sort_key(self, score: float, numa: int, used: int, numa_bind: bool) -> tuple[float, ...]:
        """HAMi's ``Less`` as a key of one device: a device sorts before another when its key
        is smaller (in a chain, the index breaks remaining ties; see :meth:`__call__`)."""
        if self.chained:
            chain = self.chain or (SPREAD,)
            if numa_bind and chain[0] != NUMA:
                chain = (NUMA, *(k for k in chain if k != NUMA))
            return tuple(
                score if k == BINPACK else -score if k == SPREAD else float(numa) for k in chain
            )
        if self.policy == MUTEX:
            return (-float(used), float(numa))
        binpack = self.policy == BINPACK
        if numa_bind:
            return (-float(numa), score) if binpack else (float(numa), -score)
        return (score, float(numa)) if binpack else (-score, float(numa))

    def __repr__(self) -> str:
        return f"HamiDeviceOrder({self.policy!r}, weights={self.weights})"

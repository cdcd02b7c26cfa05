"""Where a pod would go and why not elsewhere: /filter's answer, asked without side effects.

Why not call :meth:`Extender.filter`: it records an event on the pod, counts metrics and
teaches the placement policy the pod's shape, and a look from the web view must do none of
that. So the same decision is taken here from the same parts, in the same order as the
extender takes it (a malformed request, a pod that wants no device, a replica not ready, the
webhook's isolation rules, then feasibility with the extender's own checker and its
``FailedAndUnresolvableNodes`` test), without teaching the policy (``observe=False``); the
tests hold the two answers equal. Each group of refused nodes carries, for its first nodes,
the explanation ``xpushare fit`` prints for that node (:func:`node_fit_json`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xpushare.models import FitReason
from xpushare.models.fit import node_fit_json
from xpushare.placement import FilterResult
from xpushare.scheduler import objects as ob
from xpushare.scheduler.bounds import heavy, pod_too_large, slices
from xpushare.scheduler.extender import (
    MAX_EXTENDER_SCORE,
    NOT_LEADER,
    NOT_SYNCED,
    UNRESOLVABLE,
    distinct_demands,
    never_fits,
)

if TYPE_CHECKING:
    from xpushare.placement import Placer
    from xpushare.scheduler.cluster import ClusterState
    from xpushare.scheduler.feasible import FeasibilityChecker
    from xpushare.scheduling import PodRequest

#: Node names listed per group of refused nodes (the count says how many there are).
GROUP_NODES = 20
#: Fitting nodes listed, best first.
RANKED_NODES = 10
#: Reasons the one-line summary names with their counts (the table below has them all):
#: the refusals of a real fleet come down to two or three (memory, devices, isolation).
HEADLINE_REASONS = 3
#: Characters of one reason in that line; a reason with no short name is /filter's whole
#: message (an invalid request, the webhook's refusal), shown in full in the table.
HEADLINE_REASON_CHARS = 120


class BadPod(ValueError):
    """The pod given is not a Pod object; the message says why."""


class Explainer:
    """/filter's answer and its explanation for one pod over every node the ledger has."""

    def __init__(
        self,
        *,
        placer: Placer,
        feasibility: FeasibilityChecker,
        cluster: ClusterState,
        is_leader: Callable[[], bool],
        vet: Callable[[ob.Object], str | None],
        explain_nodes: int = 3,
    ) -> None:
        self.placer = placer
        self.feasibility = feasibility
        self.cluster = cluster
        self.is_leader = is_leader
        self.vet = vet
        self.explain_nodes = explain_nodes

    def _policy(self) -> str:
        return str(getattr(self.placer.policy, "name", type(self.placer.policy).__name__))

    async def filter(
        self, pod: Any, names: list[str] | None = None
    ) -> tuple[dict[str, Any], PodRequest | None, dict[str, FitReason | None]]:
        """The extender's /filter answer (NodeNames form) for *pod* over *names* (default:
        every node of the ledger), the parsed request and each refused node's main reason.

        Run on the scheduler's loop (``web/bridge.py``); a pod of many demands over many
        nodes is worked out in slices as the extender's /filter is (scheduler/bounds.py),
        the loop given back between them."""
        if not isinstance(pod, dict):
            raise BadPod(f"the pod must be a JSON object, not {ob.json_kind(pod)}")
        too_large = pod_too_large(pod, f"pod {ob.namespace(pod) or 'default'}/{ob.name(pod)}")
        if too_large is not None:
            raise BadPod(too_large)
        try:
            view = ob.pod_view(pod)
        except ValueError as exc:
            raise BadPod(f"the Pod is malformed: {exc}") from None
        if names is None:
            names = list(self.placer.ledger.nodes)
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        reasons: dict[str, FitReason | None] = {}

        def answer(fits: list[str], error: str = "") -> dict[str, Any]:
            return {
                "Nodes": None,
                "NodeNames": fits,
                "FailedNodes": failed,
                "FailedAndUnresolvableNodes": unresolvable,
                "Error": error,
            }

        try:
            request = self.placer.request(view)
        except ValueError as exc:
            unresolvable.update(dict.fromkeys(names, f"the pod's device request is invalid: {exc}"))
            return answer([]), None, reasons
        if not request.wants_devices:
            return answer(names), request, reasons
        if not self.is_leader():
            return answer([], NOT_LEADER), request, reasons
        if not self.cluster.synced:
            return answer([], NOT_SYNCED), request, reasons
        refused = self.vet(pod)
        if refused:
            unresolvable.update(dict.fromkeys(names, refused))
            return answer([]), request, reasons
        ledger = self.placer.ledger
        rid = self.feasibility.key_of(request)
        distinct = distinct_demands(request)
        sliced = heavy(len(names), len(request.demands))
        fits: list[str] = []
        for part in slices(names, len(request.demands)) if sliced else (names,):
            result = self.feasibility.check(request, part, observe=False)
            for name, message in result.failed.items():
                state = ledger.node(name)
                reason = result.reasons.get(name)
                reasons[name] = reason
                hopeless = (
                    state is None
                    or reason in UNRESOLVABLE
                    or never_fits(state, request, rid, distinct)
                )
                (unresolvable if hopeless else failed)[name] = message
            fits.extend(result.fits)
            if sliced:
                await asyncio.sleep(0)
        return answer(fits), request, reasons

    def _too_large(self, request: PodRequest) -> list[str]:
        """Each device demand asking more memory per device than any device of its vendor
        in the cluster has (over-commit counted), in words."""
        out = []
        ledger = self.placer.ledger
        for demand in request.demands:
            largest = self.cluster.max_device_memory(demand.vendor)
            if demand.memory_mib is None or largest is None:
                continue
            bookable = int(largest * ledger.memory_overcommit(demand.vendor))
            if demand.memory_mib > bookable:
                out.append(
                    f"{demand.memory_mib:,} MiB per {demand.vendor} device is larger than any "
                    f"{demand.vendor} device (the largest books {bookable:,} MiB)"
                )
        return out

    async def explain(self, pod: Any, names: list[str] | None = None) -> dict[str, Any]:
        """The filter answer, summarised: groups of refused nodes with the ``xpushare fit``
        explanation of their first nodes, and the fitting nodes ranked as /prioritize does.

        On the scheduler's loop, given back between groups and between slices of work."""
        answer, request, reasons = await self.filter(pod, names)
        who = f"{ob.namespace(pod) or 'default'}/{ob.name(pod) or 'pod'}"
        fits: list[str] = answer["NodeNames"]
        refused = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
        summary = FilterResult(fits=fits, failed=refused).explain()
        asks = request.describe() if request is not None else ""
        too_large = self._too_large(request) if request is not None else []
        if not fits and too_large:
            # "not enough free device memory" reads as "wait": no device is that large.
            summary = f"no node can ever hold this pod: {'; '.join(too_large)}"
        elif not fits and refused and request is not None and request.wants_devices:
            summary = f"no node has the devices this pod asks for ({asks}): {summary}"
        by_message: dict[str, list[str]] = {}
        for name, message in refused.items():
            by_message.setdefault(message, []).append(name)
        policy = self._policy()
        groups = []
        for message, nodes in sorted(by_message.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            nodes.sort()
            first = reasons.get(nodes[0])
            explanations = []
            if request is not None and request.wants_devices and not answer["Error"]:
                explanations = [
                    node_fit_json(self.placer.explain(request, n), who, policy)
                    for n in nodes[: self.explain_nodes]
                    if self.placer.ledger.node(n) is not None
                ]
                await asyncio.sleep(0)  # a fit with every device examined per node
            groups.append(
                {
                    "message": message,
                    "count": len(nodes),
                    "reason": first.value if isinstance(first, FitReason) else None,
                    "unresolvable": nodes[0] in answer["FailedAndUnresolvableNodes"],
                    "nodes": nodes[:GROUP_NODES],
                    "explanations": explanations,
                }
            )
        ranking: list[dict[str, Any]] = []
        best = None
        if fits and request is not None and request.wants_devices:
            if heavy(len(fits), len(request.demands)):
                for part in slices(fits, len(request.demands)):
                    self.placer.warm(request, part)
                    await asyncio.sleep(0)
            scores = self.placer.prioritize(request, fits)
            ordered = sorted(fits, key=lambda n: (-scores.get(n, 0.0), n))
            ranking = [
                {
                    "node": n,
                    "score": round(scores.get(n, 0.0) * MAX_EXTENDER_SCORE / 100),
                    "policy_score": round(scores.get(n, 0.0), 3),
                }
                for n in ordered[:RANKED_NODES]
            ]
            best = node_fit_json(self.placer.explain(request, ordered[0]), who, policy)
        by_reason = _by_reason(groups)
        if answer["Error"]:
            line = answer["Error"]
        elif not fits and too_large:
            line = summary
        else:
            line = headline(len(fits), len(fits) + len(refused), by_reason)
        return {
            "pod": who,
            "asks": asks,
            "policy": policy,
            "too_large": too_large,
            "reasons": by_reason,
            "nodes_considered": len(fits) + len(refused),
            "headline": line,
            "summary": answer["Error"] or summary,
            "filter": answer,
            "groups": groups,
            "ranking": ranking,
            "best": best,
        }


def _by_reason(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The refused nodes by their main reason, with counts: groups differ by their exact
    message ("4/8 devices usable", "6/8 devices usable") where one reason is shared."""
    merged: dict[str, dict[str, Any]] = {}
    for g in groups:
        key = g["reason"] or g["message"]
        entry = merged.setdefault(key, {"reason": key, "count": 0, "unresolvable": 0, "nodes": []})
        entry["count"] += g["count"]
        entry["unresolvable"] += g["count"] if g["unresolvable"] else 0
        room = GROUP_NODES - len(entry["nodes"])
        entry["nodes"].extend(g["nodes"][:room])
    return sorted(merged.values(), key=lambda e: (-e["count"], e["reason"]))


def headline(fits: int, total: int, reasons: list[dict[str, Any]]) -> str:
    """'2/24 nodes fit; 22 do not: not enough free device memory (22)': each reason once with
    its count, where the event's wording repeats it for every message that differs only in
    its figures ("0/8 devices usable: 8 not enough free device memory; ...")."""
    head = f"{fits}/{total} nodes fit"
    if not reasons:
        return head
    named = []
    for r in reasons[:HEADLINE_REASONS]:
        reason = r["reason"]
        if len(reason) > HEADLINE_REASON_CHARS:
            reason = reason[: HEADLINE_REASON_CHARS - 1] + "…"
        named.append(f"{reason} ({r['count']})")
    more = len(reasons) - HEADLINE_REASONS
    if more > 0:
        named.append(f"{more} more reason{'s' if more > 1 else ''} below")
    refused = sum(r["count"] for r in reasons)
    return f"{head}; {refused} {'does' if refused == 1 else 'do'} not: {', '.join(named)}"

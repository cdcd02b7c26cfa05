"""/filter's shortlist: of the nodes a pod fits, the few the placement policy ranks best.

Why /filter does not pass on every node that fits: kube-scheduler runs its own score plugins
on every node the extender passes, sends each of them to /prioritize, and decodes both
answers. Through the real kube-scheduler at 1,000 nodes (benchmarks/bench_realcluster.py,
2026-12-06) that was most of the difference between kube-scheduler's CPU per pod with our
extender (15.4 ms) and without it (10.0 ms, the same run): the extender phase handed it
1,000 names twice a pod and /prioritize's answer named 994 of 999 candidates. With the
shortlist it was 9.7 ms against 9.1 (docs/benchmarks.md, "Session 18"). A shortlist of the best
:data:`DEFAULT_SHORTLIST` makes its scoring, the /prioritize call and both answers a few
dozen entries whatever the cluster's size. HAMi's extender goes further and passes the one
node it would pick (research/hami-protocol.md, the filter's answer).

What it changes, and why that is right for a device pod:

* kube-scheduler's own preferences (its spreading by CPU and memory, image locality) choose
  among the policy's best nodes, not among all of them. The device policy (FGD, binpack)
  decides where a pod's devices fragment the cluster least; with every node passed on,
  kube-scheduler adds its own scores to ours (its least-allocated spreading among them, each
  of the weight the chart gives our score), and they can outvote the policy. Its hard
  rules (affinity, taints, topology spread with ``DoNotSchedule``) are untouched: it
  applies them before it asks the extender.
* A pod that states a soft preference of its own (a preferred node or pod affinity or
  anti-affinity, a topology spread with ``ScheduleAnyway``) gets every node that fits, so
  kube-scheduler weighs the preference over all of them (:func:`states_preferences`).
  Cluster-wide defaults kube-scheduler adds by itself (its default topology spread for pods
  of a Service or a ReplicaSet, ``PreferNoSchedule`` taints) apply within the shortlist.
* A node with a bind in flight ranks last (busynodes.py), so a burst spreads over the
  shortlist's nodes as it did over all of them.
* Nothing changes when no node fits: /filter then names every node with its reason, as
  kube-scheduler's diagnosis and preemption need.

Ties keep kube-scheduler's order (its filter's order, which its node tree interleaves by
zone), so of many equal nodes the shortlist takes those it listed first, and kube-scheduler
picks among them at random as it would have among all.
"""

from __future__ import annotations

from collections.abc import Container
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xpushare.placement.ranking import FloatArray

#: Nodes /filter passes on when more fit (``extender.shortlist``; 0 passes every node).
#: Sixteen: twice a node's 8 devices, so a burst of pods each wanting a device finds as many
#: idle nodes as FGD packs onto one (busynodes.py); in the benchmark it made kube-scheduler's
#: scoring and both answers a few dozen entries (docs/benchmarks.md, session 18).
DEFAULT_SHORTLIST = 16

#: The soft-preference fields of a pod's ``spec.affinity`` (kube-scheduler scores them).
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def states_preferences(pod: Any) -> bool:
    """Whether the pod asks kube-scheduler to weigh nodes by a preference of its own.

    Reads only fields kube-apiserver validated; *pod* is what kube-scheduler sent, so
    anything not shaped as a pod reads as no preference (its parse refuses it elsewhere).
    """
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if not isinstance(spec, dict):
        return False
    affinity = spec.get("affinity")
    if isinstance(affinity, dict):
        for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
            terms = affinity.get(kind)
            if isinstance(terms, dict) and terms.get(_PREFERRED):
                return True
    spread = spec.get("topologySpreadConstraints")
    if isinstance(spread, list):
        return any(
            isinstance(c, dict) and c.get("whenUnsatisfiable") == "ScheduleAnyway" for c in spread
        )
    return False


def shortlist(names: list[str], scores: FloatArray, busy: Container[str], keep: int) -> list[str]:
    """The *keep* best of *names* by *scores* (in their order; below 0: scores lowest), a
    node in *busy* below every other, in *names*' order; all of *names* when *keep* is 0 or
    they are no more than *keep*.

    On arrays: at 5,000 nodes a rank kept per node in Python lists, with the busy check a
    method call per node, was 7 % of our scheduler's CPU (py-spy, 2026-12-06); the sort runs
    in numpy and only the nodes taken are looked at one by one.
    """
    if keep <= 0 or len(names) <= keep:
        return names
    import numpy  # imported at start off the loop (preload.py); a dict lookup here

    # A stable sort of the negated ranks: the earlier of equal nodes first, so ties stay in
    # kube-scheduler's order.
    order = numpy.argsort(-scores, kind="stable")
    best: list[int] = []
    held: list[int] = []  # busy nodes passed over, best first
    for i in map(int, order):
        if names[i] in busy:
            held.append(i)
            continue
        best.append(i)
        if len(best) == keep:
            break
    else:
        best += held[: keep - len(best)]
    best.sort()
    return [names[i] for i in best]

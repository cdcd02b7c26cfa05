"""kube-scheduler's extender verbs: /filter, /prioritize and /bind (research/k8s-apis.md §3).

Why each verb looks the way it does:

* ``/filter`` and ``/prioritize`` read the in-memory ledger only: no API call, no rebuild, so
  they cost microseconds per node inside kube-scheduler's serial cycle. A node turned down
  for good (no devices of the vendor, fewer devices than asked) goes to
  ``FailedAndUnresolvableNodes`` so preemption does not try it; a node that is only full
  goes to ``FailedNodes``. Every message is the sentence a user can act on.
* ``/bind`` decides the devices on the node kube-scheduler chose and reserves them at once
  (no await between the decision and the reservation, so two binds can never get one slice),
  waits for the node's handoff, and writes the assignment and the Binding in one request,
  conditioned on the pod's resourceVersion and fenced by the leader's term (handoff.py;
  docs/scheduler.md, "Why no interleaving can double-book"). Whatever fails gives the
  reservation and the handoff back, except a Binding whose outcome is unknown: its devices
  stay booked until the pod is read back.

Handlers take and return plain JSON values; the HTTP layer (``app.py``) does the rest.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, replace
from itertools import compress
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from xpushare.codec import AGENT_MODE_KEY, ASSIGNMENT_KEY, FENCED_KEY, encode_assignment
from xpushare.errors import CodecError, PluginError
from xpushare.models import FitReason, PodAssignment, PodRef, PodView
from xpushare.placement import FilterResult, NoFit, Placer
from xpushare.scheduler import objects as ob
from xpushare.scheduler.bounds import heavy, pod_too_large, slices, too_many_candidates
from xpushare.scheduler.busynodes import BindsInFlight
from xpushare.scheduler.events import EventRecorder, ObjectRef
from xpushare.scheduler.feasible import FeasibilityChecker
from xpushare.scheduler.handoff import Fenced, HandoffAborted, HandoffManager, HandoffTimeout
from xpushare.scheduler.kube import Conflict, Kube, KubeError, NotFound
from xpushare.scheduler.shortlist import DEFAULT_SHORTLIST, shortlist, states_preferences

if TYPE_CHECKING:
    from xpushare.plugins import PluginHost
    from xpushare.scheduler.cluster import ClusterState
    from xpushare.scheduler.drabook import ClaimBook
    from xpushare.scheduler.metrics import SchedulerMetrics
    from xpushare.scheduling import NodeState, PodRequest
    from xpushare.scheduling.request import Demand

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_R = TypeVar("_R")

#: kube-scheduler's extender score range (MinExtenderPriority..MaxExtenderPriority).
MAX_EXTENDER_SCORE = 10

#: Reasons preemption cannot fix: the node lacks the devices, not free room on them.
UNRESOLVABLE = frozenset({FitReason.NO_DEVICES, FitReason.TOO_FEW_DEVICES})

#: Pods remembered between /filter and /bind, so /bind needs no GET in the normal case.
POD_CACHE_SIZE = 4096
#: Pods the policy learnt from that are remembered, so a pod asked about again (a retried
#: bind, a pod preempted and placed again) is not learnt twice: as many as the pod cache.
LEARNT_PODS_REMEMBERED = POD_CACHE_SIZE

#: Parsed device requests remembered: kube-scheduler sends each pod to /filter, then
#: /prioritize, then /bind, one pod at a time, so a few recent pods are all that repeat.
PARSE_CACHE_SIZE = 256
#: Pods larger than this (characters in the fields a parse reads) are parsed every time,
#: so the cache holds at most 256 x 64 KiB whatever callers send.
PARSE_CACHE_ENTRY_CHARS = 64 * 1024

NOT_SYNCED = (
    "xpushare has not finished reading the nodes and pods from the API server yet; "
    "kube-scheduler retries the pod shortly"
)
NOT_LEADER = (
    "this xpushare replica is not the leader; the Service should route to the leader only "
    "(check the readiness probe)"
)


def distinct_demands(request: PodRequest) -> tuple[Demand, ...]:
    """*request*'s demands, one of each kind (equal ``Demand.key``): what :func:`never_fits`
    reads of a demand is in its key, so a pod of 200 alike containers is one check a node,
    not 200 (a pod of 10,000 one-GPU containers spent 16 of its 17 s of ``/filter`` there)."""
    return tuple({d.key: d for d in request.demands}.values())


def never_fits(
    state: NodeState,
    request: PodRequest,
    key: Any = None,
    demands: tuple[Demand, ...] | None = None,
) -> bool:
    """Whether *request* could not fit *state* even if every pod left it.

    Such a node goes to ``FailedAndUnresolvableNodes``: preemption cannot help there. Only
    what never changes is looked at (devices, their health, model, UUID and memory size), and
    the answer is kept in the node's memo until the node changes. A caller asking about many
    nodes passes the request's *key* (its id: hashing the request's own key, a tuple per
    container, per node cost more than the check) and its :func:`distinct_demands`.
    """
    key = ("xpushare.scheduler.never_fits", request.key if key is None else key)
    hit = state.memo.get(key)
    if hit is not None:
        return bool(hit)
    answer = False
    for demand in request.demands if demands is None else demands:
        table = state.tables.get(demand.vendor)
        if table is None:
            answer = True
            break
        eligible = 0
        for d in table.devices:
            if not d.healthy:
                continue
            # Inline test first: most demands name no model (a call per device cost half
            # of a 256-demand pod's never-fits time).
            if (demand.include_models or demand.exclude_models) and not demand.model_allowed(
                d.model_key
            ):
                continue
            if demand.include_uuids and d.id not in demand.include_uuids:
                continue
            if d.id in demand.exclude_uuids:
                continue
            if demand.memory_for(d.memory_mib) > d.memory_cap:
                continue
            eligible += 1
        if eligible < demand.count:
            answer = True
            break
    state.remember(key, answer)
    return answer


class BadRequest(ValueError):
    """The request body is not the shape kube-scheduler sends; the message says why."""


class Overbooked(Exception):
    """The devices decided for a pod were booked meanwhile by a pod this replica had not
    seen (an older leader's last Binding, read back when this replica took the node over)."""


def _whole_devices(request: PodRequest) -> bool:
    """Whether every demand of *request* is whole devices: what a DeviceClass's
    ``extendedResourceName`` serves on a DRA node (no memory or compute share)."""
    # Compute 0 is no limit (a count-only request): the whole device, as 100 is.
    return all(
        d.exclusive
        or (
            d.memory_mib is None
            and d.memory_percent in (None, 100)
            and d.compute in (0, 100)
            and d.partition is None
        )
        for d in request.demands
    )


def _arguments(args: Any, kind: str) -> dict[str, Any]:
    """*args* when it is a JSON object; kube-scheduler always sends one."""
    if not isinstance(args, dict):
        raise BadRequest(
            f"the request body must be a JSON object ({kind}), not {ob.json_kind(args)}"
        )
    return args


@dataclass
class _Parsed:
    pod: ob.Object
    view: PodView
    request: PodRequest | None
    error: str = ""


def _chars(d: dict[str, str]) -> int:
    return sum(map(len, d)) + sum(map(len, d.values()))


def _view_chars(view: PodView) -> int:
    """The characters a parse reads, a bound on what remembering the view costs."""
    size = _chars(view.annotations) + _chars(view.labels)
    for c in view.containers:
        size += len(c.name) + _chars(c.limits) + _chars(c.requests) + _chars(c.env)
    return size


def content_key(view: PodView) -> tuple[Any, ...]:
    """Everything of *view* a parse reads but the pod's name and UID: equal for the pods of
    one workload (a Deployment's, a Job's), which ask for the same."""
    return (
        view.ref.namespace,
        view.scheduler_name,
        tuple(view.annotations.items()),
        tuple(view.labels.items()),
        tuple(
            (
                c.name,
                c.init,
                tuple(c.limits.items()),
                tuple(c.requests.items()),
                tuple(c.env.items()),
            )
            for c in view.containers
        ),
    )


class ParseCache:
    """The device request of recently parsed pods, shared by the three verbs.

    Why: each verb carries the pod and parsing it asks every installed vendor's request
    hook (nine with every wheel: a third of a millisecond a parse, bench_throughput). Keyed
    by the pod's UID and resourceVersion, but an entry is used only when the pod's view
    (every field a parse reads) equals the one parsed: a caller that sends other content
    under a known UID and version gets its own parse, never another pod's answer.

    And by content (:func:`content_key`): a pod that asks exactly what a recent one asked
    gets that one's request with its own name, without the hooks (each process meets each
    pod once: the filter worker at /filter, the leader at /bind; a workload's pods all look
    alike). Only successful parses: a refusal names its pod, so it is parsed per pod.
    """

    def __init__(self, size: int = PARSE_CACHE_SIZE) -> None:
        self._size = size
        self._entries: OrderedDict[tuple[str, str], tuple[PodView, PodRequest | None, str]] = (
            OrderedDict()
        )
        self._shapes: OrderedDict[tuple[Any, ...], PodRequest] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def parse(self, view: PodView, version: str, parse: Callable[[PodView], PodRequest]) -> Any:
        """``(request, "")``, or ``(None, why)`` for a request the user must fix."""
        key = (view.ref.uid, version)
        cacheable = bool(key[0] and key[1])
        if cacheable:
            hit = self._entries.get(key)
            if hit is not None and hit[0] == view:
                self._entries.move_to_end(key)
                return hit[1], hit[2]
        small = _view_chars(view) <= PARSE_CACHE_ENTRY_CHARS
        shape = content_key(view) if small else None
        same = None
        if shape is not None and (same := self._shapes.get(shape)) is not None:
            self._shapes.move_to_end(shape)
        request: PodRequest | None
        if same is not None:
            request, error = replace(same, pod=view.ref), ""
        else:
            try:
                request = parse(view)
                error = ""
            except ValueError as exc:  # PluginError (a vendor's bug) is not remembered
                request, error = None, str(exc)
            if request is not None and shape is not None:
                self._shapes[shape] = request
                while len(self._shapes) > self._size:
                    self._shapes.popitem(last=False)
        if cacheable and small:
            self._entries[key] = (view, request, error)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return request, error


#: Characters a JSON string carries as they are: a node name made only of these goes into
#: an answer without escaping (Kubernetes names are DNS subdomains: always).
_PLAIN_TEXT = re.compile(r"[^\"\\\x00-\x1f\x7f]*")


def score_list(names: list[str], scores: list[int]) -> orjson.Fragment:
    """/prioritize's answer, ``[{"Host": name, "Score": score}, ...]``, already encoded:
    one entry per name whose score is not 0, grouped by score.

    Why a node scored 0 is left out: kube-scheduler adds an extender's scores by host name
    and a host it does not name gets nothing, the same as 0 (schedule_one.go,
    ``prioritizeNodes``, Kubernetes 1.36); an answer of every candidate (1,000 entries at
    1,000 nodes, 33 kB) was 8 % of kube-scheduler's CPU, decoding it, and its write a good
    part of ours (benchmarks/bench_realcluster.py profiles, 2026-12-06). The one difference:
    a host named gets a random tie-breaker, one left out none, as with no extender at all.

    Why grouped: the scores take a few values (0..MAX_EXTENDER_SCORE). A dict per node and
    its encoding cost 0.18 ms a call in a quiet process; a piece of bytes per node, kept per
    name, 0.44 ms in bench_throughput's filter worker, where each object touched per node is
    a likely cache miss (2026-12-03). Here each score's names are one join of the strings
    parsed from the request. Names JSON would have to escape (never a Kubernetes name) take
    orjson's path.
    """
    joined = "".join(names)
    if not (joined.isascii() and _PLAIN_TEXT.fullmatch(joined)):
        return orjson.Fragment(
            orjson.dumps([{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True) if s])
        )
    groups = []
    for score in set(scores) - {0}:
        hosts = compress(names, map(score.__eq__, scores))
        tail = f'","Score":{score}}}'
        groups.append('{"Host":"' + (tail + ',{"Host":"').join(hosts) + tail)
    return orjson.Fragment(("[" + ",".join(groups) + "]").encode())


def from_lowest(scores: list[int]) -> list[int]:
    """*scores* less the lowest of them, so the lowest is 0 (and left out of the answer).

    Why this changes no decision: kube-scheduler adds our score, times its weight, to every
    candidate's total; the same amount taken from every candidate moves no total past
    another, so the node it picks, and the nodes tied with it, stay the same.

    When it shortens the answer: the placer's scale (placement/ranking.py) already gives the
    worst candidate 0, so the lowest is above 0 only when every candidate ties for the best
    (an empty fleet under any policy, at 1,000 nodes an answer of 1,000 entries), and the
    answer is then empty. Whenever one candidate scores lower, or a bind is in flight on one
    (it scores 0, busynodes.py), the answer names every other candidate (measured in the
    benchmark of 2026-12-06: 994 of 999 in its later rounds).
    """
    lowest = min(scores, default=0)
    if lowest <= 0:
        return scores
    return [s - lowest for s in scores]


def _assignment_text(assignment: PodAssignment) -> str:
    parts = []
    for c in assignment.containers:
        devices = ", ".join(
            f"{s.device_id} ({s.memory_mib} MiB, {s.compute_percent}% compute"
            + (", exclusive" if s.exclusive else "")
            + ")"
            for s in c.devices
        )
        kind = "init container" if c.init else "container"
        parts.append(f"{kind} {c.container}: {c.vendor} {devices}")
    return "; ".join(parts)


def _run(steps: Generator[None, None, _T]) -> _T:
    """The value of *steps* run through at once (a request worth one slice)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def _sliced(steps: Generator[None, None, _T], finish: Callable[[_T], _R]) -> _R:
    """*finish* of the value of *steps*, the event loop given back between two of its
    slices (``asyncio.sleep(0)``: every ready callback runs before the next slice)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return finish(done.value)
        await asyncio.sleep(0)


class Extender:
    """The three verbs, over the cluster state and the placement engine."""

    def __init__(
        self,
        *,
        placer: Placer,
        host: PluginHost,
        cluster: ClusterState,
        kube: Kube,
        handoffs: HandoffManager,
        events: EventRecorder,
        metrics: SchedulerMetrics,
        bind_wait_s: float,
        is_leader: Any = None,
        vet: Callable[[ob.Object, PodView | None], str | None] | None = None,
        observe_at_bind: bool = False,
        claims: ClaimBook | None = None,
        shortlist: int = DEFAULT_SHORTLIST,
    ) -> None:
        self.placer = placer
        #: The most nodes /filter passes on (shortlist.py; 0: every node that fits).
        self.shortlist = shortlist
        #: DRA mode's claims (drabook.py): a pod that names claims is ranked by them.
        self.claims = claims
        #: Teach the policy each pod's shape at /bind (when /filter is another process's).
        self.observe_at_bind = observe_at_bind
        self.feasibility = FeasibilityChecker(placer)
        self.host = host
        self.cluster = cluster
        self.ledger = cluster.ledger
        self.kube = kube
        self.handoffs = handoffs
        self.events = events
        self.metrics = metrics
        self.bind_wait_s = bind_wait_s
        self._is_leader = is_leader or (lambda: True)
        #: The webhook's isolation rules, asked again of every pod placed (webhook.py).
        self._vet = vet or (lambda pod, view: None)
        # A learnt model that cannot refresh is counted (the policy logs it and retries),
        # never raised into a request.
        placer.policy.on_model_error = self._model_failed
        self._pods: OrderedDict[str, ob.Object] = OrderedDict()
        #: The pods the policy learnt from lately (see :meth:`_learn`), oldest first.
        self._learnt: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._parsed = ParseCache()
        #: The last pod parsed, as sent, and its parse (see :meth:`_parse`).
        self._last_parsed: _Parsed | None = None
        self._aborts: dict[str, asyncio.Event] = {}
        #: Binds in flight per node: /prioritize spreads a burst while a node is busy.
        self.binding = BindsInFlight()
        #: Reservations whose Binding got no answer: kept until the pod is read back.
        self._uncertain: dict[str, tuple[PodRef, str]] = {}
        cluster.on_pod_deleted.append(self._pod_deleted)

    # -- shared ------------------------------------------------------------------------------------

    def _model_failed(self, policy: str, exc: BaseException) -> None:
        self.metrics.model_refresh_failures.labels(policy=policy).inc()

    def _pod_deleted(self, key: str) -> None:
        flag = self._aborts.get(key)
        if flag is not None:
            flag.set()

    def remember(self, pod: ob.Object) -> None:
        """Keep *pod* for its /bind (the latest copy of it wins; bounded, oldest out)."""
        # By namespace/name: /bind names the pod so, and may come without its UID.
        key = f"{ob.namespace(pod)}/{ob.name(pod)}"
        self._pods[key] = pod
        self._pods.move_to_end(key)
        while len(self._pods) > POD_CACHE_SIZE:
            self._pods.popitem(last=False)

    def _parse(self, pod: Any) -> _Parsed:
        if not isinstance(pod, dict):
            raise BadRequest("the extender arguments carry no Pod object")
        last = self._last_parsed
        if last is not None and last.pod == pod:
            # kube-scheduler sends the pod to /filter, then the same to /prioritize: an equal
            # object (compared whole, in C) has the same view and request, without building
            # the view again (0.1 ms a call in bench_throughput's filter worker).
            return _Parsed(pod, last.view, last.request, last.error)
        too_large = pod_too_large(pod, f"pod {ob.namespace(pod)}/{ob.name(pod)}")
        if too_large is not None:
            # Refused before any container is read (scheduler/bounds.py): the answer names
            # the limit, and /filter gives it for every node, as for any invalid request.
            empty = PodView(ref=ob.pod_ref(pod))
            return _Parsed(pod, empty, None, too_large)
        try:
            view = ob.pod_view(pod)
        except ValueError as exc:
            raise BadRequest(f"the Pod is malformed: {exc}") from None
        request, error = self._parsed.parse(view, ob.resource_version(pod), self.placer.request)
        parsed = _Parsed(pod, view, request, error)
        self._last_parsed = parsed if _view_chars(view) <= PARSE_CACHE_ENTRY_CHARS else None
        return parsed

    def _not_ready(self) -> str:
        if not self._is_leader():
            return NOT_LEADER
        if not self.cluster.synced:
            return NOT_SYNCED
        return ""

    @staticmethod
    def _candidates(args: dict[str, Any]) -> tuple[list[str], list[ob.Object] | None]:
        names = args.get("NodeNames")
        if names is not None:
            if not isinstance(names, list):
                raise BadRequest("NodeNames must be a list of node names")
            if (why := too_many_candidates(len(names), "NodeNames")) is not None:
                raise BadRequest(why)
            try:
                # Refuses anything but strings, at C speed (a check of each item's type was
                # 3 % of /filter at 5,000 candidates, py-spy, 2026-12-06).
                "".join(names)
            except TypeError:
                raise BadRequest("NodeNames must be a list of node names") from None
            return names, None
        nodes = args.get("Nodes")
        if isinstance(nodes, dict):
            items = nodes.get("items") or []
            if isinstance(items, list) and (why := too_many_candidates(len(items), "Nodes.items")):
                raise BadRequest(why)
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise BadRequest("Nodes.items must be a list of Node objects")
            return [ob.name(i) for i in items], items
        if nodes is None:
            return [], None
        raise BadRequest("Nodes must be a NodeList object")

    # -- /filter -----------------------------------------------------------------------------------

    def _dra_request(self, parsed: _Parsed) -> PodRequest | None:
        """What a DRA pod's unallocated claims ask of our drivers (``None``: not one)."""
        if self.claims is None or parsed.request is None or parsed.request.wants_devices:
            return None
        return self.claims.request_for(parsed.pod, parsed.view)

    def filter(
        self, args: Any, *, dra_only: bool = False
    ) -> dict[str, Any] | Coroutine[Any, Any, dict[str, Any]]:
        """``dra_only``: the ``/dra/filter`` route, for pods that name claims only (a
        second extender entry without managedResources, docs/dra.md); others pass.

        The answer, or for a request worth several slices of work (scheduler/bounds.py) a
        coroutine that works it out slice by slice (app.py awaits it)."""
        args = _arguments(args, "ExtenderArgs")
        names, items = self._candidates(args)
        parsed = self._parse(args.get("Pod"))
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}

        def answer(fits: list[str], error: str = "") -> dict[str, Any]:
            if items is None:
                return {
                    "Nodes": None,
                    "NodeNames": fits,
                    "FailedNodes": failed,
                    "FailedAndUnresolvableNodes": unresolvable,
                    "Error": error,
                }
            keep = set(fits)
            return {
                "Nodes": {"metadata": {}, "items": [i for i in items if ob.name(i) in keep]},
                "NodeNames": None,
                "FailedNodes": failed,
                "FailedAndUnresolvableNodes": unresolvable,
                "Error": error,
            }

        if parsed.request is None and dra_only:
            return answer(names)  # the managed-resources entry reports it
        if parsed.request is None:
            message = f"the pod's device request is invalid: {parsed.error}"
            unresolvable.update(dict.fromkeys(names, message))
            self.metrics.decisions.labels(verb="filter", result="invalid").inc()
            self._event(parsed.pod, "Warning", "InvalidDeviceRequest", message)
            return answer([])
        request = parsed.request
        dra = self._dra_request(parsed)
        if dra is not None and not self._not_ready():
            # The allocator's own filter ran first; this keeps nodes our ledger says are full.
            checked = self.feasibility.check(dra, names, observe=False)
            self._learn(parsed.view.ref, dra, checked.fits)
            failed.update(checked.failed)
            self.metrics.decisions.labels(verb="filter", result="dra").inc()
            return answer(checked.fits)
        if dra_only or not request.wants_devices:
            self.metrics.decisions.labels(verb="filter", result="pass").inc()
            return answer(names)
        not_ready = self._not_ready()
        if not_ready:
            self.metrics.decisions.labels(verb="filter", result="error").inc()
            return answer([], not_ready)
        refused = self._vet(parsed.pod, parsed.view)
        if refused:
            unresolvable.update(dict.fromkeys(names, refused))
            self.metrics.decisions.labels(verb="filter", result="refused").inc()
            self._event(parsed.pod, "Warning", "IsolationRefused", refused)
            return answer([])
        self.remember(parsed.pod)
        steps = self._filter_steps(parsed, request, names, failed, unresolvable)
        if heavy(len(names), len(request.demands)):
            # A pod of many device demands over many nodes: worked out in slices, the loop
            # given back between them (scheduler/bounds.py), so no other request waits
            # behind it for more than a slice.
            return _sliced(steps, answer)
        return answer(_run(steps))

    def _filter_steps(
        self,
        parsed: _Parsed,
        request: PodRequest,
        names: list[str],
        failed: dict[str, str],
        unresolvable: dict[str, str],
    ) -> Generator[None, None, list[str]]:
        """/filter's feasibility over *names*, one slice of them between two ``yield``s
        (a single slice, the whole list, for the common request); the fitting nodes."""
        sliced = heavy(len(names), len(request.demands))
        rid = self.feasibility.key_of(request)
        distinct = distinct_demands(request)
        fits: list[str] = []
        refusals: list[dict[str, str]] = []  # each slice's, for the event (no copy a call)
        tally: dict[str, int] = {}
        quota = 0
        for part in slices(names, len(request.demands)) if sliced else (names,):
            # Unsliced, /filter's own call: the placer's remembered verdicts may answer.
            result = self.feasibility.check(request, part, observe=False, scored=not sliced)
            if self.cluster.dra_nodes and not _whole_devices(request):
                result.fits = self._off_dra_nodes(request, result.fits, unresolvable)
            over = self._over_quota(request, parsed.view.ref.namespace, result.fits)
            if over:
                # The devices fit, the namespace's quota does not: another pod of it may end.
                result.fits = [n for n in result.fits if n not in over]
                failed.update(over)
                quota += len(over)
            for name, message in result.failed.items():
                state = self.ledger.node(name)
                reason = result.reasons.get(name)
                hopeless = (
                    state is None
                    or reason in UNRESOLVABLE
                    or never_fits(state, request, rid, distinct)
                )
                (unresolvable if hopeless else failed)[name] = message
                label = reason.name.lower() if isinstance(reason, FitReason) else "other"
                tally[label] = tally.get(label, 0) + 1
            if sliced:
                fits.extend(result.fits)
            else:  # the one slice: its list (at 5,000 nodes a copy is a pass of its own)
                fits = result.fits
            refusals.append(result.failed)
            if sliced:
                yield
        if quota:
            self.metrics.failures.labels(verb="filter", reason="quota").inc(quota)
        for label, n in tally.items():
            self.metrics.failures.labels(verb="filter", reason=label).inc(n)
        if fits:
            self.metrics.decisions.labels(verb="filter", result="fit").inc()
            self._learn(parsed.view.ref, request, fits)
            if not sliced and len(fits) > self.shortlist > 0:
                # A heavy pod's scores are worked out slice by slice at /prioritize; its
                # /filter passes every node on rather than hold the loop for them here.
                return self._shortlisted(parsed, request, fits)
        else:
            self.metrics.decisions.labels(verb="filter", result="nofit").inc()
            self._event(
                parsed.pod,
                "Warning",
                "NoDeviceFit",
                f"no node has the devices this pod asks for ({request.describe()}): "
                + FilterResult(
                    fits=fits, failed={k: v for part in refusals for k, v in part.items()}
                ).explain(),
            )
        return fits

    def _shortlisted(self, parsed: _Parsed, request: PodRequest, fits: list[str]) -> list[str]:
        """The policy's best :attr:`shortlist` of *fits* (shortlist.py), or all of them for
        a pod that states a soft preference kube-scheduler should weigh over every node."""
        if states_preferences(parsed.pod):
            self.metrics.shortlists.labels(result="preferences").inc()
            return fits
        self.metrics.shortlists.labels(result="shortened").inc()
        scores = self.placer.prioritize_array(request, fits)
        return shortlist(fits, scores, self.binding, self.shortlist)

    def _learn(self, ref: PodRef, request: PodRequest, fits: list[str]) -> None:
        """Teach the policy *request*'s shape when it fits somewhere, once per pod.

        Why not every pod asked about: the learnt workload weighs the fragmentation measure
        and FGD's choices, and a pod that fits on no node (8 devices of more memory than any
        has) made every free device count as fragmented and steered placement towards a
        shape that cannot run. A Pending pod is asked about again every few seconds, so a
        pod counts once (the last :data:`LEARNT_PODS_REMEMBERED` pods are remembered): no
        single pod weighs more than one arrival.
        """
        if not fits:
            return
        key = (ref.namespace, ref.name, ref.uid)
        learnt = self._learnt
        if key in learnt:
            learnt.move_to_end(key)
            return
        learnt[key] = None
        if len(learnt) > LEARNT_PODS_REMEMBERED:
            learnt.popitem(last=False)
        self.placer.observe(request)

    def _off_dra_nodes(
        self, request: PodRequest, fits: list[str], unresolvable: dict[str, str]
    ) -> list[str]:
        """*fits* without the DRA nodes, for a request of device shares (a new list when one
        is taken out, never *fits* changed: it may be the list kube-scheduler sent, which
        the placer remembers for the /prioritize after).

        On a DRA node kubelet has no device plugin: a pod written for the device-plugin path
        is served there only through a DeviceClass's ``extendedResourceName``, which gives
        whole devices and carries no memory or compute share (docs/dra.md).
        """
        dra = self.cluster.dra_nodes
        kept = [n for n in fits if n not in dra]
        if len(kept) == len(fits):
            return fits
        for name in fits:
            if name in dra:
                unresolvable[name] = (
                    f"node {name} serves its devices through DRA (annotation "
                    f"{AGENT_MODE_KEY}=dra): a share of a device ({request.describe()}) "
                    "needs a ResourceClaim there; whole devices only through the "
                    "DeviceClass's extendedResourceName (docs/dra.md)"
                )
        self.metrics.failures.labels(verb="filter", reason="dra_node").inc(len(fits) - len(kept))
        return kept

    def _over_quota(self, request: PodRequest, namespace: str, nodes: list[str]) -> dict[str, str]:
        """The nodes of *nodes* where the pod would take its namespace past a device quota,
        with the refusal naming the quota (work only for namespaces that have one)."""
        quotas = self.cluster.quotas
        if quotas is None or not nodes or not quotas.limits(namespace):
            return {}
        used = self.ledger.namespace_usage(namespace)
        if not quotas.needs_node(request, namespace):
            why = quotas.refusal(request, namespace, used)
            return dict.fromkeys(nodes, why) if why else {}
        out: dict[str, str] = {}
        for name in nodes:
            state = self.ledger.node(name)
            why = quotas.refusal(request, namespace, used, state.tables if state else None)
            if why:
                out[name] = why
        return out

    # -- /prioritize -------------------------------------------------------------------------------

    def prioritize(
        self, args: Any, *, dra_only: bool = False
    ) -> orjson.Fragment | Coroutine[Any, Any, orjson.Fragment]:
        """The HostPriorityList, already encoded (:func:`score_list`); sliced as /filter is
        for a request worth several slices of work."""
        args = _arguments(args, "ExtenderArgs")
        names, _ = self._candidates(args)
        parsed = self._parse(args.get("Pod"))
        request = self._dra_request(parsed) or (None if dra_only else parsed.request)
        self.metrics.decisions.labels(verb="prioritize", result="scored").inc()
        if request is None or not request.wants_devices or self._not_ready():
            return score_list(names, [0] * len(names))
        if heavy(len(names), len(request.demands)):
            steps = self._warm_steps(request, names)
            return _sliced(steps, lambda _: self._scored(request, names))
        return self._scored(request, names)

    def _warm_steps(self, request: PodRequest, names: list[str]) -> Generator[None, None, None]:
        """The placer's verdicts of *names* worked out slice by slice, so the scoring that
        follows reads them all remembered (a node changed between is worked out again)."""
        for part in slices(names, len(request.demands)):
            self.placer.warm(request, part)
            yield

    def _scored(self, request: PodRequest, names: list[str]) -> orjson.Fragment:
        scores = self.placer.prioritize_each(request, names)
        # Scaled once per distinct score (a few dozen), not once per node (500).
        scaled: dict[float | None, int] = {
            s: round(s * MAX_EXTENDER_SCORE / 100) for s in set(scores) if s is not None
        }
        scaled[None] = 0  # a node that does not fit
        ranked = list(map(scaled.__getitem__, scores))
        return score_list(names, from_lowest(self.binding.spread(names, ranked)))

    # -- /bind -------------------------------------------------------------------------------------

    def _event(self, pod: Any, type_: str, reason: str, message: str) -> None:
        self.events.record(
            ObjectRef("Pod", ob.namespace(pod), ob.name(pod), ob.uid(pod)), type_, reason, message
        )

    def _bind_failed(self, pod: Any, reason: str, message: str) -> dict[str, Any]:
        self.metrics.failures.labels(verb="bind", reason=reason).inc()
        self.metrics.decisions.labels(verb="bind", result="failed").inc()
        self._event(pod, "Warning", "FailedDeviceBinding", message)
        return {"Error": message}

    def _cached_pod(self, namespace: str, name: str, uid: str) -> ob.Object | None:
        pod = self._pods.get(f"{namespace}/{name}")
        if pod is not None and uid and ob.uid(pod) != uid:
            return None  # a pod of the same name from before it was re-created
        return pod

    async def bind(self, args: Any) -> dict[str, Any]:
        args = _arguments(args, "ExtenderBindingArgs")
        fields = {k: args.get(k) for k in ("PodName", "PodNamespace", "PodUID", "Node")}
        for key in ("PodName", "Node"):
            if not isinstance(fields[key], str) or not fields[key]:
                raise BadRequest(f"{key} must be a non-empty string")
        for key in ("PodNamespace", "PodUID"):
            if fields[key] is not None and not isinstance(fields[key], str):
                raise BadRequest(f"{key} must be a string, not {ob.json_kind(fields[key])}")
        name, node = str(fields["PodName"]), str(fields["Node"])
        namespace = str(fields["PodNamespace"] or "default")
        uid = fields["PodUID"] if isinstance(fields["PodUID"], str) else ""
        stub = {"metadata": {"name": name, "namespace": namespace, "uid": uid}}
        not_ready = self._not_ready()
        if not_ready:
            return self._bind_failed(stub, "not-ready", not_ready)
        # The term is taken once, before anything is decided: every write of this bind
        # carries it, so a bind that outlives its term can no longer commit.
        term = self._term()
        pod = self._cached_pod(namespace, name, uid)
        if pod is None:
            try:
                pod = await self.kube.get_pod(namespace, name)
            except NotFound:
                return self._bind_failed(stub, "pod-not-found", f"pod {namespace}/{name} not found")
            except KubeError as exc:
                return self._bind_failed(stub, "api-error", str(exc))
            if uid and ob.uid(pod) != uid:
                return self._bind_failed(
                    stub,
                    "pod-not-found",
                    f"pod {namespace}/{name} was re-created (uid {ob.uid(pod)}, not {uid})",
                )
        try:
            parsed = self._parse(pod)
        except BadRequest as exc:
            return self._bind_failed(stub, "invalid-request", str(exc))
        if parsed.request is None:
            return self._bind_failed(pod, "invalid-request", parsed.error)
        refused = self._vet(pod, parsed.view) if parsed.request.wants_devices else None
        if refused:
            return self._bind_failed(pod, "isolation", refused)
        # One identity per pod everywhere: the pod watch counts a pod under its UID, so the
        # reservation must be keyed the same way whether or not the caller sent PodUID.
        return await self._bind(pod, parsed, ob.pod_key(pod), node, term)

    async def _bind(
        self, pod: ob.Object, parsed: _Parsed, key: str, node: str, term: int | None
    ) -> dict[str, Any]:
        assert parsed.request is not None
        request = parsed.request
        ref = PodRef(namespace=ob.namespace(pod), name=ob.name(pod), uid=ob.uid(pod))
        dra = request.wants_devices and node in self.cluster.dra_nodes
        if dra and not _whole_devices(request):
            return self._bind_failed(
                pod,
                "dra-node",
                f"pod {ref} asks for device shares ({request.describe()}) and node {node} "
                f"serves its devices through DRA ({AGENT_MODE_KEY}=dra): give it a "
                "ResourceClaim instead (docs/dra.md)",
            )
        if not request.wants_devices or dra:
            # On a DRA node kube-scheduler's allocator has booked the devices in a claim
            # (the DeviceClass's extendedResourceName) and kubelet prepares it through our
            # DRA driver: nothing of ours to reserve, hand off or record on the pod.
            try:
                await self.kube.bind(ref.namespace, ref.name, ref.uid, node, {})
            except KubeError as exc:
                return self._bind_failed(pod, "api-error", str(exc))
            self.metrics.decisions.labels(verb="bind", result="bound").inc()
            return {"Error": ""}
        entry = self.ledger.entry(key)
        if entry is not None and not entry.reserved:
            if entry.node == node:
                # A retried bind of a pod that is bound already (its first answer was lost).
                return {"Error": ""}
            return self._bind_failed(
                pod, "already-bound", f"pod {ref} is already bound to node {entry.node}"
            )
        if entry is not None:
            return self._bind_failed(
                pod, "in-progress", f"a bind of pod {ref} is already in progress; retry later"
            )
        # Decide and reserve with no await in between: nobody else can take these slices.
        try:
            assignment = self.placer.decide(request, node)
        except NoFit as exc:
            return self._bind_failed(pod, "no-fit", f"pod {ref} does not fit: {exc}")
        except PluginError as exc:
            return self._bind_failed(pod, "plugin-error", str(exc))
        self.ledger.reserve(key, assignment, namespace=ref.namespace)
        if self.observe_at_bind:
            self._learn(ref, request, [node])
        self.metrics.reservations.inc()
        abort = self._aborts[key] = asyncio.Event()
        self.handoffs.in_flight.add(key)
        self.binding.started(node)
        # The version the decision was made on: the Binding's precondition. A newer leader
        # that fences this pod changes it, and then this Binding is refused.
        version = ob.resource_version(pod)
        wrote_handoff = False
        outcome = "failed"
        try:
            annotations = self._annotations(parsed.view, assignment, ref)
            loop = asyncio.get_running_loop()
            acquired = await self.handoffs.acquire(
                node,
                ref,
                tuple(sorted(assignment.vendors())),
                deadline=loop.time() + self.bind_wait_s,
                aborted=lambda: abort.is_set() or self._bound_meanwhile(key),
                term=term,
            )
            wrote_handoff = True
            version = acquired.pod_version or version
            if acquired.took_over:
                await self.handoffs.read_node_pods(node, term)
            if abort.is_set():
                raise HandoffAborted(f"pod {ref} was deleted while it was being bound")
            self._check_still_fits(key, ref, node)
            try:
                await self.kube.bind(
                    ref.namespace, ref.name, ref.uid, node, annotations, resource_version=version
                )
            except KubeError as exc:
                outcome = await self._settle_failed_binding(key, ref, node, exc)
                if outcome != "bound":
                    raise
        except (
            HandoffTimeout,
            HandoffAborted,
            Fenced,
            Overbooked,
            KubeError,
            CodecError,
            PluginError,
        ) as exc:
            if outcome != "uncertain":
                self.ledger.release(key)
            if wrote_handoff and outcome == "failed":
                await self.handoffs.release(node, ref, term)
            bound = self.ledger.entry(key)
            if bound is not None and not bound.reserved:
                # Bound meanwhile, by an earlier try of this bind or an older term's.
                if bound.node == node:
                    return {"Error": ""}
                return self._bind_failed(
                    pod, "already-bound", f"pod {ref} is already bound to node {bound.node}"
                )
            reason = {
                HandoffTimeout: "handoff-timeout",
                HandoffAborted: "pod-deleted",
                Fenced: "fenced",
                Overbooked: "overbooked",
                Conflict: "conflict",
                CodecError: "codec-error",
                PluginError: "plugin-error",
            }.get(type(exc), "api-error")
            return self._bind_failed(pod, reason, f"binding pod {ref} to node {node}: {exc}")
        finally:
            self.metrics.reservations.dec()
            self._aborts.pop(key, None)
            self.handoffs.in_flight.discard(key)
            self.binding.finished(node)
            self._pods.pop(f"{ref.namespace}/{ref.name}", None)
        self.ledger.confirm(key)
        self.cluster.assume(key)
        self.metrics.decisions.labels(verb="bind", result="bound").inc()
        self._event(
            pod,
            "Normal",
            "DevicesAssigned",
            f"node {node} (policy {getattr(self.placer.policy, 'name', '?')}): "
            + _assignment_text(assignment),
        )
        return {"Error": ""}

    def _term(self) -> int | None:
        return self.handoffs.term()

    def _bound_meanwhile(self, key: str) -> bool:
        # A fence or a node re-read found the pod bound already (an older term's Binding
        # landed): the reservation was replaced by the bound pod, nothing is left to do.
        entry = self.ledger.entry(key)
        return entry is not None and not entry.reserved

    def _check_still_fits(self, key: str, ref: PodRef, node: str) -> None:
        problems = self.ledger.overbooked(node, key)
        if problems:
            raise Overbooked(
                f"the devices chosen for pod {ref} were taken meanwhile ({'; '.join(problems)}); "
                "kube-scheduler retries the pod"
            )

    async def _settle_failed_binding(self, key: str, ref: PodRef, node: str, exc: KubeError) -> str:
        """After a Binding that failed: "bound", "failed" or "uncertain".

        A 409 means the pod changed or is bound already (maybe by an older term's Binding);
        no answer at all means the Binding may have landed. Either way the pod is read back,
        by fencing it (so a Binding still in flight cannot land later), and counted as the
        API server has it: a Binding we cannot see must never free its devices.
        """
        if exc.status not in (0, 409) and exc.status < 500:
            return "failed"
        try:
            obj = await self.kube.patch_pod_annotations(
                ref.namespace, ref.name, {FENCED_KEY: str(self._term() or 0)}
            )
        except NotFound:
            return "failed"
        except KubeError:
            self._uncertain[key] = (ref, node)
            return "uncertain"
        if ref.uid and ob.uid(obj) != ref.uid:
            return "failed"
        self.cluster.apply_pod(obj)
        return "bound" if ob.node_name(obj) == node and self._bound_meanwhile(key) else "failed"

    async def settle_uncertain(self) -> int:
        """Resolve binds whose outcome was unknown (the API server did not answer): keep
        their reservation until the pod is read back. Called periodically; the number
        still unknown."""
        for key, (ref, node) in list(self._uncertain.items()):
            entry = self.ledger.entry(key)
            if entry is None or not entry.reserved:
                self._uncertain.pop(key, None)
                continue
            outcome = await self._settle_failed_binding(
                key, ref, node, KubeError(0, "outcome unknown")
            )
            if outcome != "uncertain":
                self._uncertain.pop(key, None)
                self.ledger.release(key)
                self.metrics.reservations_settled.inc()
        return len(self._uncertain)

    def _annotations(self, view: PodView, assignment: PodAssignment, ref: PodRef) -> dict[str, str]:
        annotations = {ASSIGNMENT_KEY: encode_assignment(assignment, pod=str(ref))}
        for vendor in sorted(assignment.vendors()):
            handle = self.host.vendors.get(vendor)
            if handle is None:
                continue
            extra = handle.patch_annotations(pod=view, assignment=assignment, taken=annotations)
            annotations.update(extra)
        return annotations

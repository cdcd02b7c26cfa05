"""The ``xpushare scheduler`` process: extender, webhook, probes and metrics on one event loop.

Why one asyncio process: the watches, the usage ledger, the extender and the webhook share
state without locks when they share a loop (DESIGN.md §1, §7). This module builds the parts
from the configuration and wires them: HTTP routes with a body cap and clear errors for bad
input, TLS with certificate reload, the node and pod informers, leader election, the event
recorder and the periodic handoff repair.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from xpushare.placement import Placer
from xpushare.plugins import PluginHost
from xpushare.scheduler import objects as ob
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduler.config import SchedulerConfig
from xpushare.scheduler.connections import (
    FD_RESERVE,
    ConnectionGuard,
    ConnectionLimits,
    GuardedSite,
    ensure_descriptors,
)
from xpushare.scheduler.drabook import ClaimBook
from xpushare.scheduler.events import EventRecorder, ObjectRef
from xpushare.scheduler.extender import BadRequest, Extender
from xpushare.scheduler.hami_metrics import (
    HamiSnapshot,
    hami_container_rows,
    hami_device_rows,
    hami_quota_rows,
)
from xpushare.scheduler.handoff import HandoffManager
from xpushare.scheduler.httpserver import (
    Handler,
    HttpServer,
    Limits,
    Reply,
    Request,
    plain_error,
)
from xpushare.scheduler.informer import Handlers, Informer
from xpushare.scheduler.kube import Kube, Resource
from xpushare.scheduler.leader import LeaderElector
from xpushare.scheduler.leaderlabel import LeaderLabel
from xpushare.scheduler.looplag import watch_lag
from xpushare.scheduler.loopthread import LoopThread
from xpushare.scheduler.metrics import (
    SchedulerMetrics,
    ledger_rows,
    namespace_rows,
    quota_rows,
)
from xpushare.scheduler.preload import preload
from xpushare.scheduler.versions import ListSnapshot, number
from xpushare.scheduler.web import WebView
from xpushare.scheduler.webhook import BadReview, Webhook
from xpushare.scheduler.workers import FilterWorkers
from xpushare.scheduling import UsageLedger
from xpushare.scheduling.quota import QuotaBook, QuotaResource

log = logging.getLogger(__name__)

#: How long a replica shutting down waits to take the leader label off its pod: a
#: termination grace period is 30 s by default, and a label left on is taken off by the next
#: leader anyway.
LABEL_WAIT_S = 3.0

_TEXT = "text/plain; charset=utf-8"

#: Content codings a request body may carry. kube-scheduler and the API server never compress
#: what they send (Go's client compresses nothing it uploads), so a compressed body is refused
#: (415) rather than inflated: inflating is a zip bomb's way in.
_IDENTITY = frozenset({"", "identity"})


class CertificateReloader:
    """A server TLS context whose certificate is re-read when its files change on disk."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple[Any, ...] = ()
        self.loads = 0
        self.reload()

    def _current(self) -> tuple[Any, ...]:
        # A Secret volume swaps a symlink, so stat (following links) both files.
        stamps = []
        for path in (self.cert_file, self.key_file):
            st = path.stat()
            stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def reload(self) -> bool:
        """Load the files if they changed since the last load; True when loaded."""
        try:
            stamp = self._current()
        except OSError as exc:
            if not self._stamp:
                raise
            log.warning("TLS files unreadable, keeping the current certificate: %s", exc)
            return False
        if stamp == self._stamp:
            return False
        try:
            # New handshakes use the new chain; established connections keep theirs.
            self.context.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (OSError, ssl.SSLError) as exc:
            if not self._stamp:
                raise
            log.warning("new TLS certificate not loaded, keeping the current one: %s", exc)
            return False
        self._stamp = stamp
        self.loads += 1
        return True


def quota_book(host: PluginHost) -> QuotaBook:
    """The quotas the scheduler enforces: each vendor's memory and compute resources."""
    resources: dict[str, QuotaResource] = {}
    for name, handle in host.vendors.items():
        names = handle.spec.resource_names
        if names.memory:
            resources[names.memory] = QuotaResource(name, "memory", handle.spec.memory_unit_mib)
        if names.compute:
            resources[names.compute] = QuotaResource(name, "compute")
    return QuotaBook(resources)


class Scheduler:
    """Everything ``xpushare scheduler`` runs, built from a configuration."""

    def __init__(
        self,
        config: SchedulerConfig,
        *,
        host: PluginHost,
        kube: Kube,
        identity: str | None = None,
        freeze_gc: bool = True,
        worker: bool = False,
    ) -> None:
        self.config = config
        #: A filter worker (scheduler/workers.py): /filter and /prioritize only, no Lease,
        #: no writes; its leader process streams it the reservations it makes.
        self.worker = worker
        self.host = host
        self.kube = kube
        self.identity = (
            identity or config.leader.identity or (f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}")
        )
        self.metrics = SchedulerMetrics(hami_names=config.metrics.hami_names)
        placement = config.placement
        self.ledger = UsageLedger(
            memory_overcommit=placement.memory_overcommit,
            compute_overcommit=placement.compute_overcommit,
        )
        self.events = EventRecorder(kube, config.scheduler_name, self.identity)
        self._reported: dict[tuple[str, str, str], str] = {}
        # The placer first: it gives the vendors their request defaults (memory units), which
        # the quotas' memory caps count in.
        self.placer = Placer(self.ledger, host=host, config=placement)
        self.cluster = ClusterState(
            self.ledger,
            report=self._report,
            quotas=quota_book(host),
            handoffs=not worker,
            tamper=self._tampered,
        )
        #: DRA mode's allocated claims, booked into the same ledger (docs/dra.md).
        self.claims: ClaimBook | None = None
        if config.dra.enabled:
            self.claims = ClaimBook(self.ledger, host.vendors, report=self._report)
            self.cluster.on_node_changed.append(self.claims.node_changed)
        self.leader: LeaderElector | None = None
        self.leader_label: LeaderLabel | None = None
        if config.leader.enabled and not worker:
            self.leader = LeaderElector(
                kube,
                namespace=config.leader.namespace,
                name=config.leader.name,
                identity=self.identity,
                lease_duration_s=config.leader.lease_duration_s,
                renew_deadline_s=config.leader.renew_deadline_s,
                retry_period_s=config.leader.retry_period_s,
                on_change=self._leadership_changed,
                floor=lambda: self.cluster.highest_term,
            )
            if config.leader.pod:
                self.leader_label = LeaderLabel(
                    kube,
                    namespace=config.leader.pod_namespace or config.leader.namespace,
                    pod=config.leader.pod,
                )
        leader = self.leader
        self.handoffs = HandoffManager(
            kube,
            self.cluster,
            self.metrics,
            ttl_s=config.bind.handoff_ttl_s,
            conflict_retries=config.bind.conflict_retries,
            term=(lambda: leader.term) if leader is not None else (lambda: None),
            raise_term=leader.raise_term if leader is not None else None,
            pods_version=self._pods_version,
        )
        self.webhook = Webhook(
            host=host,
            cluster=self.cluster,
            config=config.webhook,
            scheduler_name=config.scheduler_name,
        )
        self.workers: FilterWorkers | None = None
        if config.server.filter_workers and not worker:
            self.workers = FilterWorkers(config, self.ledger, self.metrics)
        self.extender = Extender(
            placer=self.placer,
            host=host,
            cluster=self.cluster,
            kube=kube,
            handoffs=self.handoffs,
            events=self.events,
            metrics=self.metrics,
            bind_wait_s=config.bind.wait_s,
            is_leader=self.is_leader,
            vet=self.webhook.isolation_problem,
            # With workers, /filter (where a policy learns the workload) is theirs: the
            # leader learns from the pods it binds instead.
            observe_at_bind=self.workers is not None,
            claims=self.claims,
            shortlist=config.extender.shortlist,
        )

        def informer(resource: Resource, handlers: Handlers) -> Informer:
            return Informer(
                kube,
                resource,
                handlers,
                watch_timeout_s=config.kube.watch_timeout_s,
                on_error=self._watch_error,
                on_expired=self._watch_expired,
                stale_after_s=config.kube.watch_stale_s,
            )

        self.informers = [
            informer(
                "nodes",
                Handlers(self._replace_nodes, self.cluster.apply_node, self.cluster.delete_node),
            ),
            informer(
                "pods", Handlers(self._replace_pods, self._apply_pod, self.cluster.delete_pod)
            ),
            informer(
                "resourcequotas",
                Handlers(self._replace_quotas, self.cluster.apply_quota, self.cluster.delete_quota),
            ),
        ]
        if not worker:
            # The nodes' handoff Leases (handoffbook.py): only the process that binds waits
            # for them, so a filter worker never watches them.
            kube.handoff_namespace = config.bind.handoff_namespace
            book = self.cluster.handoff_book
            self.informers.append(
                informer("handoffs", Handlers(book.replace, book.apply, book.delete))
            )
        if self.claims is not None:
            claims = self.claims
            self.informers += [
                informer(
                    "resourceslices",
                    Handlers(
                        lambda items, _: claims.replace_slices(items),
                        claims.apply_slice,
                        claims.delete_slice,
                    ),
                ),
                informer(
                    "resourceclaims",
                    Handlers(
                        claims.replace_claims,
                        claims.apply_claim,
                        claims.delete_claim,
                    ),
                ),
            ]
        self.web: WebView | None = None
        self._first_sync_done = False
        if config.web.enabled and not worker:
            self.web = WebView(
                config=config.web,
                cluster=self.cluster,
                placer=self.placer,
                feasibility=self.extender.feasibility,
                kube=kube,
                is_leader=self.is_leader,
                vet=self.webhook.isolation_problem,
                scheduler_name=config.scheduler_name,
            )
        self.tls: CertificateReloader | None = None
        #: Freeze the garbage collector's view of the heap after the first full sync.
        self.freeze_gc = freeze_gc
        self._tasks: list[asyncio.Task[Any]] = []
        self._runners: list[web.AppRunner] = []
        #: The web view's loop and thread, and its listener (loopthread.py).
        self._web_thread: LoopThread | None = None
        self._web_runners: list[web.AppRunner] = []
        self._servers: list[HttpServer] = []
        #: Each JSON verb's request-time histogram (``_route``).
        self._timers: dict[str, Any] = {}
        self.ports: dict[str, int] = {}

    # -- state -------------------------------------------------------------------------------------

    def _leadership_changed(self, leading: bool) -> None:
        self.metrics.leader.set(1 if leading else 0)
        if self.leader_label is not None:
            self.leader_label.changed(leading)

    def _pods_version(self) -> int:
        """The revision up to which the pod watch has been applied (0 before its list)."""
        pods = next((i for i in self.informers if i.resource == "pods"), None)
        return number(pods.version) if pods is not None else 0

    def is_leader(self) -> bool:
        return self.leader is None or self.leader.is_leader

    @property
    def ready(self) -> bool:
        """What ``/readyz`` answers: synced, watches working, workers listed, leading."""
        return not self._replica_problem() and self.is_leader()

    def _replace_nodes(self, items: Any, snapshot: ListSnapshot | None = None) -> None:
        # A relist replaces the node list first, then the pods are read against it.
        self.cluster.replace_nodes(items, snapshot)
        self._after_list()

    def _after_list(self) -> None:
        """What the first complete sync starts, whichever informer completes it (they list
        in parallel: the pods' list, smaller, usually lands before the nodes')."""
        synced = self.cluster.synced
        self.metrics.synced.set(1 if synced else 0)
        if not synced or self._first_sync_done:
            return
        self._first_sync_done = True
        if self.web is not None:
            # The web view's node digests, so the first fleet page does not pay for them all.
            self.web.fleet.refresh()
        if self.freeze_gc:
            # The client's generated modules and the first lists are hundreds of thousands
            # of long-lived objects; a full collection walking them all stalls the loop for
            # hundreds of milliseconds (bench_throughput, 5,000 nodes: 180-210 ms each, two
            # a run). Moving them out of the collector's reach keeps /filter's tail short
            # (the same trick as Instagram's and CPython's docs). Only once every list is
            # in: frozen earlier, the nodes read after stayed in reach.
            gc.collect()
            gc.freeze()

    def _replace_quotas(self, items: Any, snapshot: ListSnapshot | None = None) -> None:
        self.cluster.replace_quotas(items)
        self._after_list()

    def _apply_pod(self, obj: ob.Object) -> None:
        self.cluster.apply_pod(obj)
        self._remember_pending(obj)

    def _remember_pending(self, obj: ob.Object) -> None:
        """Keep a pod waiting for this scheduler where /bind looks first.

        With filter workers, /filter (where the extender remembers the pod kube-scheduler
        sends) runs in another process, so without this every /bind would GET its pod from
        the API server. The watch's copy serves as well: /bind's Binding is conditioned on
        the resourceVersion it read, so a copy that is already stale is refused, never
        acted on.
        """
        if (
            self.workers is not None
            and not ob.node_name(obj)
            and ob.spec(obj).get("schedulerName") == self.config.scheduler_name
            and ob.phase(obj) not in ob.FINISHED_PHASES
        ):
            self.extender.remember(obj)

    def _replace_pods(self, items: Any, snapshot: ListSnapshot | None = None) -> None:
        items = list(items)
        self.cluster.replace_pods(items, snapshot)
        for obj in items:
            self._remember_pending(obj)
        self._after_list()

    def _watch_error(self, resource: str, exc: Exception) -> None:
        self.metrics.watch_errors.labels(resource=resource).inc()

    def _watch_expired(self, resource: str) -> None:
        self.metrics.watch_expired.labels(resource=resource).inc()

    def _tampered(self, obj: ob.Object, edit: str, message: str) -> None:
        """A bound pod's allocation record was edited (cluster.py ignores the edit): log it,
        count it, and tell the pod's owner, once per pod and edit."""
        ident = ("tamper", ob.uid(obj) or f"{ob.namespace(obj)}/{ob.name(obj)}", edit)
        if self._reported.get(ident) == message:
            return
        if len(self._reported) > 10_000:
            self._reported.clear()
        self._reported[ident] = message
        self.metrics.assignment_tampering.labels(edit=edit).inc()
        log.warning("ignored an edit of an allocation record: %s", message)
        ref = ObjectRef("Pod", ob.namespace(obj), ob.name(obj), ob.uid(obj))
        self.events.record(ref, "Warning", "AllocationEditIgnored", message)

    def _informers_healthy(self) -> list[str]:
        """The resources whose list and watch have failed too long (readiness turns false)."""
        stale: list[str] = []
        for informer in self.informers:
            healthy = informer.healthy
            self.metrics.informer_healthy.labels(resource=informer.resource).set(
                1 if healthy else 0
            )
            if not healthy:
                stale.append(informer.resource)
        return stale

    def _report(self, kind: str, obj: ob.Object, key: str, message: str) -> None:
        """A malformed annotation: log it, count it, and tell the object's owner, once."""
        ident = (kind, ob.uid(obj) or f"{ob.namespace(obj)}/{ob.name(obj)}", key)
        if self._reported.get(ident) == message:
            return
        if len(self._reported) > 10_000:
            self._reported.clear()
        self._reported[ident] = message
        self.metrics.annotation_errors.labels(kind=kind, key=key).inc()
        if kind in ("resourceclaim", "resourceslice", "lease"):
            # The message names the object; no Event: those would need its API group, and
            # a claim's author reads kube-scheduler's own events about it (a handoff Lease
            # has no author but us: the log and the metric reach its operator).
            log.warning("ignored a malformed %s field %s: %s", kind, key, message)
            return
        log.warning("ignored a malformed annotation: %s", message)
        if kind == "pod":
            ref = ObjectRef("Pod", ob.namespace(obj), ob.name(obj), ob.uid(obj))
        elif kind == "resourcequota":
            ref = ObjectRef("ResourceQuota", ob.namespace(obj), ob.name(obj), ob.uid(obj))
        else:
            ref = ObjectRef("Node", "", ob.name(obj), ob.uid(obj))
        self.events.record(ref, "Warning", "MalformedAnnotation", message)

    # -- HTTP --------------------------------------------------------------------------------------

    def _error(
        self,
        verb: str,
        status: int,
        reason: str,
        message: str,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> Reply:
        self.metrics.failures.labels(verb=verb, reason=reason).inc()
        body = {"Error": message} if verb != "webhook" else {"error": message}
        return Reply(status, orjson.dumps(body), headers=headers)

    def _route(self, verb: str, handler: Callable[[Any], Any]) -> Handler:
        """The HTTP handler of one JSON verb: refuse what is not JSON, answer what it says.

        Synchronous for a synchronous *handler* (/filter, /prioritize, the webhook): the
        server calls it inline and writes its answer, no task made (httpserver.py).
        """
        # Looked up once: /filter's answer should not pay for a labelled lookup per call.
        histogram = self._timers[verb] = self.metrics.request_seconds.labels(verb=verb)

        def handle(request: Request) -> Reply | Awaitable[Reply]:
            # Timed from here: the time to receive the body is the network's and the
            # client's; from here on (parse, decide, encode) it is ours.
            started = time.perf_counter()
            coding = request.headers.get("content-encoding")
            if coding is not None:
                bad = [
                    t for t in (c.strip().lower() for c in coding.split(",")) if t not in _IDENTITY
                ]
                if bad:
                    histogram.observe(time.perf_counter() - started)
                    return self._error(
                        verb,
                        415,
                        "bad-encoding",
                        f"request body has Content-Encoding {', '.join(bad)}; only uncompressed "
                        "(identity) bodies are accepted",
                        (("Accept-Encoding", "identity"),),
                    )
            try:
                # orjson: a fifth of the standard parser's time on 500-name bodies, and it
                # refuses NaN, lone surrogates and depth past 1,024 itself.
                body = orjson.loads(request.body)
            except (ValueError, RecursionError) as exc:
                return self._done(
                    verb,
                    self._error(verb, 400, "bad-json", f"request body is not valid JSON: {exc}"),
                    started,
                )
            try:
                result = handler(body)
            except (BadRequest, BadReview) as exc:
                return self._done(verb, self._error(verb, 400, "bad-request", str(exc)), started)
            except Exception as exc:  # a bug: answer, log, never crash the server
                log.exception("%s failed", verb)
                return self._done(verb, self._internal(verb, exc), started)
            if asyncio.iscoroutine(result):
                return self._awaited(verb, result, started)
            return self._answer(verb, result, started)

        return handle

    def _internal(self, verb: str, exc: Exception) -> Reply:
        return self._error(verb, 500, "internal", f"internal error in {verb}: {type(exc).__name__}")

    def _done(self, verb: str, reply: Reply, started: float) -> Reply:
        self._timers[verb].observe(time.perf_counter() - started)
        return reply

    async def _awaited(self, verb: str, result: Awaitable[Any], started: float) -> Reply:
        try:
            value = await result
        except (BadRequest, BadReview) as exc:
            return self._done(verb, self._error(verb, 400, "bad-request", str(exc)), started)
        except Exception as exc:  # a bug: answer, log, never crash the server
            log.exception("%s failed", verb)
            return self._done(verb, self._internal(verb, exc), started)
        return self._answer(verb, value, started)

    def _answer(self, verb: str, result: Any, started: float) -> Reply:
        try:
            payload = orjson.dumps(result)
        except TypeError as exc:  # a bug (a value JSON has no form for), not the caller's
            log.error("%s answered what JSON cannot carry: %s", verb, exc)
            return self._done(
                verb,
                self._error(verb, 500, "internal", f"internal error in {verb}: {exc}"),
                started,
            )
        # Server-side time (parse, decide, encode) for operators and the benchmark.
        spent = time.perf_counter() - started
        self._timers[verb].observe(spent)
        # A follower's answer to an extender verb closes the connection: a Service keeps an
        # established connection on the pod it chose, so kube-scheduler's kept-alive
        # connection to a leader that lost the Lease would hear "not the leader" forever; a
        # new connection goes where the Service sends it now, the leader (the real-cluster
        # suite, two replicas with the leader SIGSTOPped).
        close = verb != "webhook" and not self.is_leader()
        return Reply(
            200,
            payload,
            headers=(("Server-Timing", f"app;dur={spent * 1000:.3f}"),),
            close=close,
        )

    def _healthz(self, request: Request) -> Reply:
        return Reply(200, b"ok", _TEXT)

    def _replica_problem(self) -> bytes:
        """Why this replica could not serve as leader now (b"": it could)."""
        if not self.cluster.synced:
            return b"caches not synced"
        stale = self._informers_healthy()
        if stale:
            return f"cannot list or watch {', '.join(stale)} from the API server".encode()
        if self.workers is not None and not self.workers.synced:
            return self.workers.describe().encode()
        return b""

    def _readyz(self, request: Request) -> Reply:
        problem = self._replica_problem()
        if problem:
            return Reply(503, problem, _TEXT)
        if not self.is_leader():
            return Reply(503, b"not the leader", _TEXT)
        return Reply(200, b"ok", _TEXT)

    def _readyz_replica(self, request: Request) -> Reply:
        """Ready as a replica: synced and following the cluster, leader or not (the chart's
        readiness probe: a PodDisruptionBudget counts Ready pods, leaderlabel.py)."""
        problem = self._replica_problem()
        return Reply(503, problem, _TEXT) if problem else Reply(200, b"ok", _TEXT)

    async def _metrics(self, request: Request) -> Reply:
        rows = ledger_rows(self.ledger)
        namespaces = namespace_rows(self.ledger)
        quotas = quota_rows(self.ledger, self.cluster.quotas)
        hami = None
        if self.metrics.hami is not None:
            hami = HamiSnapshot(
                hami_device_rows(self.ledger),
                hami_quota_rows(self.ledger, self.cluster.quotas),
                hami_container_rows(self.ledger, self.cluster.pods),
            )
        text = await asyncio.to_thread(self.metrics.render, rows, namespaces, quotas, hami)
        return Reply(200, text, "text/plain; version=0.0.4")

    def routes(
        self, *, probes_only: bool = False
    ) -> tuple[dict[str, dict[str, Handler]], dict[str, str]]:
        """The listener's routes (path -> method -> handler), and the verb of each JSON path
        (the server's own refusals of a request to it are worded and counted as the verb's)."""
        routes: dict[str, dict[str, Handler]] = {
            "/healthz": {"GET": self._healthz},
            "/readyz": {"GET": self._readyz},
            "/readyz/replica": {"GET": self._readyz_replica},
            "/metrics": {"GET": self._metrics},
        }
        verbs: dict[str, str] = {}
        if probes_only:
            return routes, verbs
        prefix = self.config.server.extender_prefix.rstrip("/")
        handlers: dict[str, tuple[str, Callable[[Any], Any]]] = {
            f"{prefix}/filter": ("filter", self.extender.filter),
            f"{prefix}/prioritize": ("prioritize", self.extender.prioritize),
            # The second extender entry of DRA mode (docs/dra.md): no managedResources, so
            # it is asked about every pod, and answers only those that name claims.
            f"{prefix}/dra/filter": ("dra-filter", partial(self.extender.filter, dra_only=True)),
            f"{prefix}/dra/prioritize": (
                "dra-prioritize",
                partial(self.extender.prioritize, dra_only=True),
            ),
        }
        if not self.worker:  # a worker has no bind and no webhook: the leader's
            handlers[f"{prefix}/bind"] = ("bind", self.extender.bind)
            handlers[self.config.server.webhook_path] = ("webhook", self.webhook.review)
        for path, (verb, handler) in handlers.items():
            routes[path] = {"POST": self._route(verb, handler)}
            verbs[path] = verb
        return routes, verbs

    # -- life cycle --------------------------------------------------------------------------------

    async def start_background(self) -> None:
        """Watches, leader election, events and repairs (no listener)."""
        for informer in self.informers:
            self._tasks.append(
                asyncio.create_task(informer.run(), name=f"watch-{informer.resource}")
            )
        self._tasks.append(asyncio.create_task(watch_lag(self.metrics.loop_lag), name="loop-lag"))
        self._tasks.append(asyncio.create_task(preload(), name="preload"))
        if self.worker:
            return  # it writes nothing: no events, no Lease, no repairs
        self.events.start()
        if self.leader is not None:
            self._tasks.append(asyncio.create_task(self._campaign(), name="leader-election"))
        self._tasks.append(asyncio.create_task(self._repair_loop(), name="handoff-repair"))

    async def _campaign(self) -> None:
        """Campaign for the Lease once the nodes and their handoff Leases are listed: a new
        term starts above every term the handoffs carry (LeaderElector's floor), and a
        replica that cannot list the cluster could not decide anything as leader anyway."""
        assert self.leader is not None
        for informer in self.informers:
            if informer.resource in ("nodes", "handoffs"):
                await informer.synced.wait()
        await self.leader.run()

    async def start(self, *, listen_sock: socket.socket | None = None) -> None:
        """Everything, with the listeners of the configuration (a worker: *listen_sock*,
        the filter port its leader bound)."""
        server = self.config.server
        tls = self.config.tls
        if tls.cert_file is not None and tls.key_file is not None:
            self.tls = CertificateReloader(tls.cert_file, tls.key_file)
            self._tasks.append(asyncio.create_task(self._tls_loop(), name="tls-reload"))
        await self.start_background()
        if self.worker:
            if listen_sock is None:
                raise ValueError("a filter worker needs the listening socket of its leader")
            ensure_descriptors(server.max_connections + FD_RESERVE)
            self.ports["filter"] = await self._serve(
                "filter",
                self.routes(),
                server.host,
                0,
                self.tls.context if self.tls else None,
                sock=listen_sock,
            )
            return
        listeners = (2 if server.metrics_port else 1) + (1 if self.web is not None else 0)
        ensure_descriptors(listeners * server.max_connections + FD_RESERVE)
        self.ports["main"] = await self._serve(
            "main",
            self.routes(),
            server.host,
            server.port,
            self.tls.context if self.tls else None,
        )
        if server.metrics_port:
            self.ports["metrics"] = await self._serve(
                "metrics", self.routes(probes_only=True), server.host, server.metrics_port, None
            )
        if self.web is not None:
            # Its own port, plain HTTP, localhost by default (docs/web-view.md), served by a
            # loop of its own in a thread of its own (loopthread.py): no web client delays a
            # decision; what it reads of the state it asks this loop for (web/bridge.py).
            web_config = self.config.web
            self.web.main.loop = asyncio.get_running_loop()
            self._web_thread = LoopThread("xpushare-web")
            self.ports["web"] = await self._web_thread.run(
                self._listen(
                    "web",
                    self.web.app(),
                    web_config.host,
                    web_config.port,
                    None,
                    runners=self._web_runners,
                )
            )
        if self.workers is not None:
            self.ports["filter"] = await self.workers.start()

    def _guard(self, name: str) -> ConnectionGuard:
        server = self.config.server
        return ConnectionGuard(
            name,
            ConnectionLimits(
                header_timeout_s=server.header_timeout_s,
                idle_timeout_s=server.idle_timeout_s,
                max_connections=server.max_connections,
            ),
            on_active=self.metrics.connections.labels(listener=name).set,
            on_closed=lambda reason: self.metrics.connections_closed.labels(
                listener=name, reason=reason
            ).inc(),
        )

    async def _serve(
        self,
        name: str,
        routes: tuple[dict[str, dict[str, Handler]], dict[str, str]],
        host: str,
        port: int,
        context: ssl.SSLContext | None,
        *,
        sock: socket.socket | None = None,
    ) -> int:
        """A listener of the scheduler's own server (httpserver.py): the verbs and probes."""
        server = self.config.server
        table, verbs = routes

        def refused(path: str, status: int, reason: str, message: str) -> Reply:
            verb = verbs.get(path)
            if verb is None:
                return plain_error(path, status, reason, message)
            return self._error(verb, status, reason, message)

        listener = HttpServer(
            table,
            self._guard(name),
            Limits(
                header_timeout_s=server.header_timeout_s,
                body_timeout_s=server.body_timeout_s,
                idle_timeout_s=server.idle_timeout_s,
                max_body_bytes=server.max_body_bytes,
            ),
            on_error=refused,
        )
        bound = await listener.start(host, port, ssl_context=context, sock=sock)
        self._servers.append(listener)
        return bound

    async def _listen(
        self,
        name: str,
        app: web.Application,
        host: str,
        port: int,
        context: ssl.SSLContext | None,
        *,
        runners: list[web.AppRunner] | None = None,
    ) -> int:
        """A listener of an aiohttp application (the web view), on the running loop; its
        runner is kept in *runners* (default: this loop's)."""
        server = self.config.server
        guard = self._guard(name)
        app.middlewares.append(guard.middleware)
        runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=1.0,
            # Bodies are read as sent: a compressed one is refused, never inflated.
            auto_decompress=False,
            # The guard closes idle connections; aiohttp's own timer (an hour by default)
            # is only a second line.
            keepalive_timeout=server.idle_timeout_s,
        )
        await runner.setup()
        site = GuardedSite(runner, host, port, guard, ssl_context=context)
        await site.start()
        (self._runners if runners is None else runners).append(runner)
        return site.port

    async def _repair_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.bind.repair_interval_s)
            if self.cluster.synced and self.is_leader():
                try:
                    await self.handoffs.repair_all()
                    left = await self.extender.settle_uncertain()
                    self.metrics.reservations_uncertain.set(left)
                except Exception:
                    log.exception("handoff repair failed")

    async def _tls_loop(self) -> None:
        assert self.tls is not None
        while True:
            await asyncio.sleep(self.config.tls.reload_interval_s)
            if self.tls.reload():
                log.info("reloaded the TLS certificate from %s", self.tls.cert_file)

    async def wait_synced(self, timeout_s: float = 30.0) -> None:
        """Until every informer has listed and, with leader election, the first campaign
        round (which waits for the nodes' list) has run."""
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*(i.synced.wait() for i in self.informers))
            if self.leader is not None and not self.worker:
                await self.leader.campaigned.wait()

    async def stop(self) -> None:
        if self.workers is not None:
            await self.workers.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.leader_label is not None:
            # Stepping down (the campaign's end said so): the Service must stop routing here.
            await self.leader_label.finish(LABEL_WAIT_S)
        await self.events.stop()
        for listener in self._servers:
            await listener.close()
        self._servers.clear()
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
        if self._web_thread is not None:
            for runner in self._web_runners:
                await self._web_thread.run(runner.cleanup())
            self._web_runners.clear()
            await self._web_thread.stop()
            self._web_thread = None

    async def run_forever(self) -> None:
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

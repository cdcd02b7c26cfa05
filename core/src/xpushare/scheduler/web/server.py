"""The web view's HTTP side: the static page, the JSON API, access control.

The page and its script are files of this package (``static/``), read once at start: no CDN,
nothing fetched at run time, and a Content-Security-Policy that lets the page load nothing
but itself. Every API call is checked by :class:`TokenChecker` first (which lets everyone
in when ``web.auth.mode`` is ``none``: the listener is on localhost then).

The handlers run on the web view's own loop and thread (``scheduler/loopthread.py``); every
read of the scheduler's state, and every API call, goes to the scheduler's loop through
:class:`~xpushare.scheduler.web.bridge.SchedulerLoop`, in calls of bounded cost.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml
from aiohttp import web

from xpushare.scheduler import objects as ob
from xpushare.scheduler.kube import KubeError, NotFound
from xpushare.scheduler.web.auth import TokenChecker
from xpushare.scheduler.web.bridge import SchedulerLoop
from xpushare.scheduler.web.details import (
    MAX_QUERY_CHARS,
    counted_pod,
    event_rows,
    namespace_tasks,
    node_detail,
    search,
)
from xpushare.scheduler.web.explain import BadPod, Explainer
from xpushare.scheduler.web.fleet import FilterError, FleetFilter, FleetView
from xpushare.scheduler.web.history import SETTING, BadRange, memory_history, parse_minutes
from xpushare.scheduler.web.hostcheck import host_middleware
from xpushare.scheduler.web.live import LiveUnavailable, LiveUsage
from xpushare.scheduler.web.openapi import document

if TYPE_CHECKING:
    from xpushare.placement import Placer
    from xpushare.scheduler.cluster import ClusterState
    from xpushare.scheduler.config import WebConfig
    from xpushare.scheduler.feasible import FeasibilityChecker
    from xpushare.scheduler.kube import Kube

log = logging.getLogger(__name__)

#: Largest what-if body: a Pod manifest is a few KB; the API server's own cap is 3 MiB.
MAX_WHATIF_BYTES = 256 * 1024
#: zlib's level for the fleet answer: level 1 leaves the 5,000 x 8 answer at some 10 % of its
#: size in a few milliseconds (docs/benchmarks.md); higher levels gain little on repeated digits.
FLEET_GZIP_LEVEL = 1
#: A what-if body must arrive within this (the page sends it in one write).
BODY_TIMEOUT_S = 10.0
#: Files the page is made of, with their types.
STATIC = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "style.css": "text/css",
}
#: The page loads nothing but its own files and calls nothing but its own API.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors and aliases: a pasted manifest never needs them, and they are
    how a small document becomes a huge one."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("aliases (*name) are not accepted")
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if getattr(event, "anchor", None):
            raise yaml.YAMLError("anchors (&name) are not accepted")
        return super().compose_node(parent, index)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=SECURITY_HEADERS)


def _json(payload: Any) -> web.Response:
    return web.Response(
        text=json.dumps(payload, separators=(",", ":")),
        content_type="application/json",
        headers=SECURITY_HEADERS,
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class WebView:
    """The read-only web view of one scheduler's state."""

    def __init__(
        self,
        *,
        config: WebConfig,
        cluster: ClusterState,
        placer: Placer,
        feasibility: FeasibilityChecker,
        kube: Kube,
        is_leader: Callable[[], bool],
        vet: Callable[[ob.Object], str | None],
        scheduler_name: str,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.ledger = cluster.ledger
        self.placer = placer
        self.kube = kube
        self.scheduler_name = scheduler_name
        self.is_leader = is_leader
        #: Where the scheduler's state is read: its own loop (``app.py`` binds it when the
        #: view runs on a thread of its own; unbound, on the caller's loop).
        self.main = SchedulerLoop()
        self.fleet = FleetView(self.ledger, placer.policy)
        #: The last compressed fleet answer, by its ETag and status (see :meth:`_fleet`).
        self._fleet_gzip: tuple[str, bytes] | None = None
        self.explainer = Explainer(
            placer=placer,
            feasibility=feasibility,
            cluster=cluster,
            is_leader=is_leader,
            vet=vet,
            explain_nodes=config.explain_nodes,
        )
        self.auth = TokenChecker(kube, config.auth)
        self.live = (
            LiveUsage(config.prometheus_url, config.prometheus_timeout_s)
            if config.prometheus_url
            else None
        )
        package = resources.files("xpushare.scheduler.web") / "static"
        self._static = {name: (package / name).read_bytes() for name in STATIC}
        self._openapi = json.dumps(document(), indent=1)

    async def close(self) -> None:
        if self.live is not None:
            await self.live.close()

    # -- plumbing ------------------------------------------------------------------------------

    def _guarded(self, handler: Handler) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            verdict = await self.main.wait(self.auth.check(request.headers.get("Authorization")))
            if not verdict.allowed:
                response = _error(verdict.status, verdict.message)
                if verdict.status == 401:
                    response.headers["WWW-Authenticate"] = 'Bearer realm="xpushare"'
                return response
            try:
                return await handler(request)
            except Exception as exc:  # a bug: answer, log, never crash the server
                log.exception("web view: %s %s failed", request.method, request.path)
                return _error(500, f"internal error: {type(exc).__name__}")

        return handle

    def _file(self, name: str) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            return web.Response(
                body=self._static[name], content_type=STATIC[name], headers=SECURITY_HEADERS
            )

        return handle

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=MAX_WHATIF_BYTES + 1, middlewares=[host_middleware(self.config)]
        )
        app.router.add_get("/", self._file("index.html"))
        for name in STATIC:
            app.router.add_get(f"/static/{name}", self._file(name))
        app.router.add_get("/api/v1/openapi.json", self._openapi_json)
        app.router.add_get("/api/v1/fleet", self._guarded(self._fleet))
        app.router.add_get("/api/v1/history", self._guarded(self._history))
        app.router.add_get("/api/v1/nodes/{name}", self._guarded(self._node))
        app.router.add_get("/api/v1/pods/{namespace}/{name}", self._guarded(self._pod))
        app.router.add_get("/api/v1/search", self._guarded(self._search))
        app.router.add_get("/api/v1/namespaces/{namespace}/pods", self._guarded(self._namespace))
        app.router.add_post("/api/v1/whatif", self._guarded(self._whatif))
        app.on_cleanup.append(lambda _: self.close())
        return app

    # -- handlers ------------------------------------------------------------------------------

    async def _openapi_json(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            text=self._openapi, content_type="application/json", headers=SECURITY_HEADERS
        )

    def _status(self) -> dict[str, Any]:
        # No clock in it: the answer then stays the same bytes while the fleet does, and its
        # compressed form is reused (the response's Date header says when).
        return {"synced": self.cluster.synced, "leader": self.is_leader()}

    def _fleet_now(self, flt: FleetFilter) -> tuple[str, dict[str, Any]]:
        """The fleet answer (joined from cached per-node digests) and the status, read
        together on the scheduler's loop."""
        return self.fleet.answer(flt), self._status()

    async def _fleet(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            flt = FleetFilter.parse(request.query, request.query.getall("label", []))
        except FilterError as exc:
            return _error(400, str(exc))
        text, now = await self.main.call(self._fleet_now, flt)
        status = json.dumps(now, separators=(",", ":"))
        # The state, not the clock, makes the ETag: unchanged fleet, same tag, 304.
        tag = '"' + hashlib.blake2b(text.encode(), digest_size=12).hexdigest() + '"'
        spent = (time.perf_counter() - started) * 1000
        headers = {**SECURITY_HEADERS, "ETag": tag, "Server-Timing": f"app;dur={spent:.3f}"}
        if tag in request.headers.get("If-None-Match", ""):
            return web.Response(status=304, headers=headers)
        body = (text[:-1] + ',"status":' + status + "}").encode()
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            # 1.65 MB at 5,000 nodes x 8 GPUs, mostly repeated digits: some 5 % of it
            # compressed, on this thread (the web view's own), not the scheduler's loop; the
            # last one is kept, for every poller of an unchanged fleet without its ETag.
            key = tag + status
            cached = self._fleet_gzip
            if cached is not None and cached[0] == key:
                body = cached[1]
            else:
                body = gzip.compress(body, compresslevel=FLEET_GZIP_LEVEL, mtime=0)
                self._fleet_gzip = (key, body)
            headers["Content-Encoding"] = "gzip"
            headers["Vary"] = "Accept-Encoding"
        spent = (time.perf_counter() - started) * 1000
        headers["Server-Timing"] = f"app;dur={spent:.3f}"
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _history(self, request: web.Request) -> web.StreamResponse:
        try:
            minutes = parse_minutes(request.query)
        except BadRange as exc:
            return _error(400, str(exc))
        if self.live is None:
            return _json(
                {
                    "configured": False,
                    "minutes": minutes,
                    "message": f"allocated versus used over time needs Prometheus: set {SETTING}",
                }
            )
        try:
            # On the view's own loop: Prometheus is asked, the scheduler's state never read.
            return _json(await memory_history(self.live, minutes))
        except LiveUnavailable as exc:
            return _error(503, str(exc))

    def _node_now(self, name: str) -> dict[str, Any] | None:
        state = self.ledger.node(name)
        if state is None:
            return None
        return node_detail(state, self.ledger, self.cluster, self.placer.policy)

    async def _node(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        payload = await self.main.call(self._node_now, name)
        if payload is None:
            return _error(404, f"node {name[:253]!r} is not in the scheduler's ledger")
        payload["live"] = None
        payload["live_error"] = None if self.live else "no Prometheus URL configured"
        if self.live is not None:
            try:
                payload["live"] = await self.live.node(name)
            except LiveUnavailable as exc:
                payload["live_error"] = str(exc)
        return _json(payload)

    async def _events(self, namespace: str, name: str) -> tuple[list[dict[str, Any]], str | None]:
        try:
            events = await self.main.wait(self.kube.list_pod_events(namespace, name))
            return event_rows(events), None
        except KubeError as exc:
            return [], f"events not read: {exc}"

    async def _pod(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info["namespace"]
        name = request.match_info["name"]
        events, events_error = await self._events(namespace, name)
        counted = await self.main.call(counted_pod, self.cluster, namespace, name)
        payload: dict[str, Any] = {
            "namespace": namespace,
            "name": name,
            "events": events,
            "events_error": events_error,
            "assignment": counted,
            "explanation": None,
        }
        if counted is not None:
            payload["state"] = counted["state"]
            return _json(payload)
        try:
            obj = await self.main.wait(self.kube.get_pod(namespace, name))
        except NotFound:
            return _error(404, f"pod {namespace}/{name} not found")
        except KubeError as exc:
            return _error(503, f"pod {namespace}/{name} could not be read: {exc}")
        # A counted pod may have been bound meanwhile (the await above).
        counted = await self.main.call(counted_pod, self.cluster, namespace, name)
        if counted is not None:
            payload.update(state=counted["state"], assignment=counted)
            return _json(payload)
        payload["phase"] = ob.phase(obj)
        payload["node"] = ob.node_name(obj)
        if ob.node_name(obj) or ob.phase(obj) in ob.FINISHED_PHASES:
            # Bound without devices of ours, or finished: nothing to explain.
            payload["state"] = "other"
            return _json(payload)
        payload["state"] = "pending"
        try:
            payload["explanation"] = await self.main.wait(self.explainer.explain(obj))
        except BadPod as exc:
            payload["explanation_error"] = str(exc)
        return _json(payload)

    async def _namespace(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info["namespace"]
        if len(namespace) > MAX_QUERY_CHARS:
            return _error(400, f"namespace: longer than {MAX_QUERY_CHARS} characters")
        payload = await self.main.call(namespace_tasks, namespace, self.ledger, self.cluster)
        return web.json_response(payload, headers=SECURITY_HEADERS)

    async def _search(self, request: web.Request) -> web.StreamResponse:
        text = request.query.get("q", "")
        if len(text) > MAX_QUERY_CHARS:
            return _error(400, f"q: longer than {MAX_QUERY_CHARS} characters")
        pending: list[ob.Object] = []
        error = None
        if text.strip():
            try:
                pending = [
                    p
                    for p in await self.main.wait(self.kube.list_pending_pods())
                    if ob.spec(p).get("schedulerName") == self.scheduler_name
                ]
            except KubeError as exc:
                error = f"pending pods not read: {exc}"
        payload = await self.main.call(search, text, self.ledger, self.cluster, pending)
        payload["pending_error"] = error
        return _json(payload)

    async def _whatif(self, request: web.Request) -> web.StreamResponse:
        if request.content_length is not None and request.content_length > MAX_WHATIF_BYTES:
            return _error(413, f"the pod is larger than {MAX_WHATIF_BYTES} bytes")
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                raw = await request.content.read(MAX_WHATIF_BYTES + 1)
        except TimeoutError:
            return _error(408, f"the pod did not arrive within {BODY_TIMEOUT_S} s")
        if len(raw) > MAX_WHATIF_BYTES:
            return _error(413, f"the pod is larger than {MAX_WHATIF_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _error(400, "the pod must be UTF-8 text (JSON or YAML)")
        try:
            pod = json.loads(text)
        except (ValueError, RecursionError):
            try:
                pod = yaml.load(text, Loader=_NoAliasLoader)
            except (yaml.YAMLError, RecursionError) as exc:
                return _error(400, f"the pod is neither JSON nor YAML: {exc}")
        if not isinstance(pod, dict):
            return _error(400, f"the pod must be an object, not {ob.json_kind(pod)}")
        kind = pod.get("kind")
        if kind not in (None, "Pod"):
            return _error(400, f"kind: {str(kind)[:60]!r}; paste a Pod (kind: Pod)")
        try:
            return _json(await self.main.wait(self.explainer.explain(pod)))
        except BadPod as exc:
            return _error(400, str(exc))

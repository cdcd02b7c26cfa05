"""A small, real Kubernetes API server over HTTP, for tests that use the real ``kubernetes`` client.

Why not kmock (checked against kmock 0.8 with the official client): it has no
``resourceVersion`` (a stale merge patch is accepted), no Binding subresource (500), and a
watch with a ``resourceVersion`` replays every object instead of resuming, so it can never
answer 410 Gone. The scheduler depends on exactly those three behaviours (optimistic
concurrency on the node handoff, one-write bind, watch resume and relist), so this server
implements them for the endpoints xpushare uses, and nothing else:

* core ``v1`` nodes, pods (with the ``binding`` and ``status`` subresources), events and
  namespaces; ``coordination.k8s.io/v1`` leases; ``resource.k8s.io/v1`` ResourceSlices and
  DeviceClasses (cluster-scoped), ResourceClaims and their templates; any other plural is
  stored generically; deleting an object deletes what names it in ``ownerReferences`` (the
  garbage collector's work, done at once);
  TokenReviews and SubjectAccessReviews are answered by :attr:`FakeApiServer.reviewers`;
* a pod created over HTTP has its resources defaulted as kube-apiserver does (requests from
  limits, whole numbers in canonical form: ``8000`` is stored as ``8k``; ``put`` stores what
  a test gives, as is);
* list (with ``labelSelector`` ``k=v`` and ``fieldSelector`` ``a.b=v`` / ``a.b!=v``), get,
  create (``generateName`` too), replace, delete;
* patch as JSON merge patch (RFC 7386; a strategic merge patch is treated the same way, which
  is exact for the maps xpushare patches) and JSON patch (RFC 6902 add/remove/replace/test);
  ``metadata.resourceVersion`` in a patch or a replace is a precondition (409 when stale);
* watch: with no ``resourceVersion`` (or ``0``) the current objects come first as ``ADDED``;
  with one, the events after it are replayed from a bounded history, and a version older than
  the history answers an ``ERROR`` event with code 410, as the real server does after etcd
  compaction (:meth:`FakeApiServer.compact` forces that);
* ``dropped_fields``: fields removed from what is created or replaced, as a server whose
  feature gate for them is off drops them (DRADeviceTaints off: ``spec.devices[].taints``);
* every request is recorded (:attr:`FakeApiServer.requests`) so tests can check the writes;
  :meth:`FakeApiServer.inject` makes chosen requests fail or wait.

Use it as ``async with FakeApiServer() as api:`` and point a client at ``api.url``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import json
import re
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

#: Resources that live outside namespaces.
CLUSTER_SCOPED = frozenset({"nodes", "namespaces", "resourceslices", "deviceclasses"})

_KINDS = {
    "nodes": "Node",
    "pods": "Pod",
    "events": "Event",
    "leases": "Lease",
    "namespaces": "Namespace",
    "configmaps": "ConfigMap",
    "resourcequotas": "ResourceQuota",
    "resourceslices": "ResourceSlice",
    "resourceclaims": "ResourceClaim",
    "resourceclaimtemplates": "ResourceClaimTemplate",
    "deviceclasses": "DeviceClass",
}

#: The group/version of the kinds above that are not in core v1.
_API_VERSIONS = {
    "resourceslices": "resource.k8s.io/v1",
    "resourceclaims": "resource.k8s.io/v1",
    "resourceclaimtemplates": "resource.k8s.io/v1",
    "deviceclasses": "resource.k8s.io/v1",
}

# Enough for every test's churn; the real server keeps about five minutes of etcd history.
DEFAULT_HISTORY = 10_000

_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)

Object = dict[str, Any]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    #: The ``Authorization`` header as sent ("" without one): what credentials reached us.
    authorization: str = ""

    @property
    def resource(self) -> str | None:
        match = _PATH.match(self.path)
        return match.group("plural") if match else None

    @property
    def subresource(self) -> str | None:
        match = _PATH.match(self.path)
        return match.group("sub") if match else None


#: A coroutine a test runs when a chosen request arrives (``before``) or has been served and
#: is about to be answered (``after``): e.g. stop the client's process at that very point.
Hook = Callable[[RecordedRequest], Awaitable[None]]


@dataclass
class _Injection:
    method: str
    pattern: re.Pattern[str]
    status: int
    times: int
    delay_s: float
    message: str
    before: Hook | None = None
    after: Hook | None = None
    match: Callable[[RecordedRequest], bool] | None = None


@dataclass
class _Watcher:
    plural: str
    namespace: str | None
    selector: Callable[[Object], bool]
    queue: asyncio.Queue[Object | None] = field(default_factory=asyncio.Queue)


class ApiStatusError(Exception):
    """A failure the server answers with a Kubernetes ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def status_object(code: int, reason: str, message: str) -> Object:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ApiStatusError(422, "Invalid", f"JSON pointer {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: Object, ops: list[Any]) -> Object:
    """RFC 6902 add, remove, replace and test (what admission and xpushare use)."""
    doc: Any = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiStatusError(422, "Invalid", f"not a JSON patch operation: {op!r}")
        parts = _pointer(op["path"])
        parent: Any = doc
        for part in parts[:-1]:
            try:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            except (KeyError, IndexError, ValueError) as exc:
                raise ApiStatusError(
                    422, "Invalid", f"path {op['path']!r} does not exist ({exc})"
                ) from None
        last = parts[-1]
        kind = op["op"]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(index, copy.deepcopy(op.get("value")))
            elif kind == "remove":
                parent.pop(index)
            elif kind == "replace":
                parent[index] = copy.deepcopy(op.get("value"))
            elif kind == "test" and parent[index] != op.get("value"):
                raise ApiStatusError(422, "Invalid", f"test failed at {op['path']!r}")
        elif isinstance(parent, dict):
            if kind == "add":
                parent[last] = copy.deepcopy(op.get("value"))
            elif kind == "remove" or kind == "replace":
                if last not in parent:
                    raise ApiStatusError(422, "Invalid", f"path {op['path']!r} does not exist")
                if kind == "remove":
                    del parent[last]
                else:
                    parent[last] = copy.deepcopy(op.get("value"))
            elif kind == "test" and parent.get(last) != op.get("value"):
                raise ApiStatusError(422, "Invalid", f"test failed at {op['path']!r}")
        else:
            raise ApiStatusError(422, "Invalid", f"path {op['path']!r} has no container")
    result: Object = doc
    return result


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _selector(label: str | None, fields: str | None) -> Callable[[Object], bool]:
    label_terms = [t.split("=", 1) for t in (label or "").split(",") if "=" in t]
    field_terms: list[tuple[str, str, bool]] = []
    for term in (fields or "").split(","):
        if "!=" in term:
            path, value = term.split("!=", 1)
            field_terms.append((path, value, False))
        elif "=" in term:
            path, value = term.split("=", 1)
            field_terms.append((path.rstrip("="), value, True))

    def matches(obj: Object) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        for key, value in label_terms:
            if labels.get(key) != value:
                return False
        for path, value, equal in field_terms:
            actual = _dig(obj, path)
            actual_text = "" if actual is None else str(actual)
            if (actual_text == value) != equal:
                return False
        return True

    return matches


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeApiServer:
    """An in-memory Kubernetes API server on a local port; see the module docstring."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        history: int = DEFAULT_HISTORY,
        dropped_fields: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.host = host
        #: Fields dropped from what is written, per plural, as a real API server drops the
        #: fields of a feature gate that is off (e.g. ``{"resourceslices":
        #: ["spec.devices[].taints"]}`` for a server without DRADeviceTaints); ``[]`` after a
        #: name means every item of that list.
        self.dropped_fields = {k: tuple(v) for k, v in (dropped_fields or {}).items()}
        self.objects: dict[tuple[str, str | None, str], Object] = {}
        self.requests: list[RecordedRequest] = []
        self._rv = 0
        self._last: dict[str, int] = {}
        self._history: deque[tuple[int, str, str | None, Object]] = deque(maxlen=history)
        self._oldest_rv = 0
        self._watchers: list[_Watcher] = []
        self._injections: list[_Injection] = []
        #: Answers for create-only review resources (``tokenreviews``,
        #: ``subjectaccessreviews``): plural -> a function from the request body to the
        #: answered object, as the real server's authenticator and authorizer fill ``status``.
        self.reviewers: dict[str, Callable[[Object], Object]] = {}
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port = 0

    # -- life cycle --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> FakeApiServer:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.host, 0)
        await self._site.start()
        server = self._site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        self.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeApiServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- direct access for tests -------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def last_version(self, plural: str) -> int:
        """The version of the latest change to any object of *plural* (0: none yet)."""
        return self._last.get(plural, 0)

    def get(self, plural: str, name: str, namespace: str | None = None) -> Object | None:
        """A copy of a stored object, or None."""
        obj = self.objects.get((plural, self._ns(plural, namespace), name))
        return copy.deepcopy(obj) if obj is not None else None

    def items(self, plural: str, namespace: str | None = None) -> list[Object]:
        return [
            copy.deepcopy(o)
            for (p, ns, _), o in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
            if p == plural and (namespace is None or ns == namespace)
        ]

    def put(self, plural: str, obj: Object) -> Object:
        """Create or replace an object directly (no precondition), emitting the watch event."""
        meta = obj.setdefault("metadata", {})
        key = (plural, self._ns(plural, meta.get("namespace")), meta["name"])
        if key[1] is not None:
            meta["namespace"] = key[1]
        existed = key in self.objects
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        return self._store(plural, key, obj, "MODIFIED" if existed else "ADDED")

    def modify(
        self, plural: str, name: str, change: Callable[[Object], None], namespace: str | None = None
    ) -> Object:
        """Change an object in place through *change*, emitting MODIFIED."""
        key = (plural, self._ns(plural, namespace), name)
        obj = copy.deepcopy(self.objects[key])
        change(obj)
        return self._store(plural, key, obj, "MODIFIED")

    def delete(self, plural: str, name: str, namespace: str | None = None) -> None:
        key = (plural, self._ns(plural, namespace), name)
        self._remove(plural, key)

    def compact(self) -> None:
        """Forget the watch history: any watch resumed from an older version gets 410 Gone."""
        self._history.clear()
        self._oldest_rv = self._rv

    def close_watches(self) -> None:
        """End every open watch stream, as a real server does when its watch timeout passes."""
        for watcher in self._watchers:
            watcher.queue.put_nowait(None)

    def inject(
        self,
        method: str,
        path_regex: str,
        status: int = 500,
        *,
        times: int = 1,
        delay_s: float = 0.0,
        message: str = "injected failure",
        before: Hook | None = None,
        after: Hook | None = None,
        match: Callable[[RecordedRequest], bool] | None = None,
    ) -> None:
        """Make the next *times* requests matching *method* and *path_regex* fail or wait.

        ``status`` 0 with a *delay_s* only delays them and then serves them normally.
        *before* is awaited when such a request arrives, before it is served (the request
        takes effect only once it returns); *after* once it has been served, before the
        answer is sent (it has taken effect, the client does not know yet). *match*, when
        given, must also hold for the request (e.g. on its query).
        """
        self._injections.append(
            _Injection(
                method.upper(),
                re.compile(path_regex),
                status,
                times,
                delay_s,
                message,
                before,
                after,
                match,
            )
        )

    def clear_injections(self) -> None:
        """Forget every injection not yet used up."""
        self._injections.clear()

    def writes(self, resource: str | None = None) -> list[RecordedRequest]:
        """Recorded requests that change something (not GET), optionally of one resource."""
        return [
            r
            for r in self.requests
            if r.method != "GET" and (resource is None or r.resource == resource)
        ]

    # -- storage -----------------------------------------------------------------------------

    @staticmethod
    def _ns(plural: str, namespace: str | None) -> str | None:
        return None if plural in CLUSTER_SCOPED else (namespace or "default")

    def _store(
        self, plural: str, key: tuple[str, str | None, str], obj: Object, kind: str
    ) -> Object:
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        if plural in _KINDS:
            obj.setdefault("kind", _KINDS[plural])
            obj.setdefault("apiVersion", _API_VERSIONS.get(plural, "v1"))
        self.objects[key] = obj
        self._emit(plural, key[1], kind, obj)
        return copy.deepcopy(obj)

    def _remove(self, plural: str, key: tuple[str, str | None, str]) -> Object:
        obj = self.objects.pop(key, None)
        if obj is None:
            raise ApiStatusError(404, "NotFound", f'{plural} "{key[2]}" not found')
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._emit(plural, key[1], "DELETED", obj)
        self._collect_garbage(str(obj["metadata"].get("uid") or ""))
        return obj

    def _collect_garbage(self, owner_uid: str) -> None:
        """Delete what *owner_uid* owned, as the garbage collector does (background
        propagation, at once here): e.g. a Node's ResourceSlices when the Node goes."""
        if not owner_uid:
            return
        owned = [
            key
            for key, obj in self.objects.items()
            if any(
                isinstance(ref, dict) and ref.get("uid") == owner_uid
                for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
            )
        ]
        for key in owned:
            if key in self.objects:
                self._remove(key[0], key)

    def _emit(self, plural: str, namespace: str | None, kind: str, obj: Object) -> None:
        self._last[plural] = self._rv
        event = {"type": kind, "object": copy.deepcopy(obj)}
        if len(self._history) == self._history.maxlen and self._history:
            self._oldest_rv = self._history[0][0]
        self._history.append((self._rv, plural, namespace, event))
        for watcher in self._watchers:
            if (
                watcher.plural == plural
                and watcher.namespace in (None, namespace)
                and watcher.selector(obj)
            ):
                watcher.queue.put_nowait(event)

    # -- HTTP --------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        content_type = request.headers.get("Content-Type", "")
        self.requests.append(
            RecordedRequest(
                request.method,
                request.path,
                dict(request.query),
                content_type,
                body,
                request.headers.get("Authorization", ""),
            )
        )
        recorded = self.requests[-1]
        after: Hook | None = None
        try:
            for injection in self._injections:
                if injection.method in (request.method, "*") and injection.pattern.search(
                    request.path
                ):
                    if injection.times <= 0:
                        continue
                    if injection.match is not None and not injection.match(recorded):
                        continue
                    injection.times -= 1
                    if injection.before is not None:
                        await injection.before(recorded)
                    if injection.delay_s:
                        await asyncio.sleep(injection.delay_s)
                    if injection.status:
                        raise ApiStatusError(injection.status, "InternalError", injection.message)
                    after = injection.after
                    break
            response = await self._route(request, body, content_type)
            if after is not None:
                await after(recorded)
            return response
        except ApiStatusError as exc:
            return web.json_response(
                status_object(exc.code, exc.reason, exc.message), status=exc.code
            )

    async def _route(
        self, request: web.Request, body: Any, content_type: str
    ) -> web.StreamResponse:
        if request.path in ("/version", "/version/"):
            return web.json_response({"major": "1", "minor": "37", "gitVersion": "v1.37.0-fake"})
        match = _PATH.match(request.path)
        if match is None:
            raise ApiStatusError(404, "NotFound", f"the server could not find {request.path}")
        plural = match.group("plural")
        namespace = match.group("ns")
        name = match.group("name")
        sub = match.group("sub")
        method = request.method
        if name is None and method == "POST" and plural in self.reviewers:
            if not isinstance(body, dict):
                raise ApiStatusError(400, "BadRequest", "the body must be a JSON object")
            return web.json_response(self.reviewers[plural](body), status=201)
        if name is None:
            if method == "GET":
                if request.query.get("watch") in ("true", "1"):
                    return await self._watch(request, plural, namespace)
                return web.json_response(self._list(request, plural, namespace))
            if method == "POST":
                return web.json_response(self._create(plural, namespace, body), status=201)
            raise ApiStatusError(405, "MethodNotAllowed", f"{method} on a collection")
        key = (plural, self._ns(plural, namespace), name)
        if sub == "binding" and plural == "pods" and method == "POST":
            return web.json_response(self._bind(key, body), status=201)
        if sub not in (None, "status"):
            raise ApiStatusError(404, "NotFound", f"subresource {sub!r} is not served here")
        if method == "GET":
            obj = self.objects.get(key)
            if obj is None:
                raise ApiStatusError(404, "NotFound", f'{plural} "{name}" not found')
            return web.json_response(obj)
        if method == "PATCH":
            return web.json_response(self._patch(key, body, content_type))
        if method == "PUT":
            return web.json_response(self._replace(key, body))
        if method == "DELETE":
            return web.json_response(self._remove(plural, key))
        raise ApiStatusError(405, "MethodNotAllowed", f"{method} on an object")

    def _list(self, request: web.Request, plural: str, namespace: str | None) -> Object:
        selector = _selector(request.query.get("labelSelector"), request.query.get("fieldSelector"))
        items = [
            o
            for (p, ns, _), o in self.objects.items()
            if p == plural and (namespace is None or ns == namespace) and selector(o)
        ]
        return {
            "kind": _KINDS.get(plural, "Object") + "List",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    async def _watch(
        self, request: web.Request, plural: str, namespace: str | None
    ) -> web.StreamResponse:
        selector = _selector(request.query.get("labelSelector"), request.query.get("fieldSelector"))
        since = request.query.get("resourceVersion", "")
        timeout = float(request.query.get("timeoutSeconds", "0") or 0)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        watcher = _Watcher(plural, namespace, selector)
        backlog: list[Object] = []
        if since in ("", "0"):
            backlog = [
                {"type": "ADDED", "object": copy.deepcopy(o)}
                for (p, ns, _), o in self.objects.items()
                if p == plural and (namespace is None or ns == namespace) and selector(o)
            ]
        else:
            try:
                start = int(since)
            except ValueError:
                start = -1
            if start < self._oldest_rv:
                gone = status_object(
                    410, "Expired", f"too old resource version: {since} ({self._oldest_rv})"
                )
                await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                return response
            backlog = [
                ev
                for rv, p, ns, ev in self._history
                if rv > start
                and p == plural
                and (namespace is None or ns == namespace)
                and selector(ev["object"])
            ]
        self._watchers.append(watcher)
        try:
            for event in backlog:
                await response.write(json.dumps(event).encode() + b"\n")
            deadline = asyncio.get_running_loop().time() + timeout if timeout > 0 else None
            while True:
                wait = None
                if deadline is not None:
                    wait = deadline - asyncio.get_running_loop().time()
                    if wait <= 0:
                        break
                try:
                    async with asyncio.timeout(wait):
                        item = await watcher.queue.get()
                except TimeoutError:
                    break
                if item is None:
                    break
                await response.write(json.dumps(item).encode() + b"\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.remove(watcher)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    def _create(self, plural: str, namespace: str | None, body: Any) -> Object:
        if not isinstance(body, dict):
            raise ApiStatusError(400, "BadRequest", "the body must be a JSON object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            else:
                raise ApiStatusError(422, "Invalid", "metadata.name: Required value")
        ns = self._ns(plural, namespace or meta.get("namespace"))
        if ns is not None:
            meta["namespace"] = ns
        key = (plural, ns, meta["name"])
        if key in self.objects:
            raise ApiStatusError(409, "AlreadyExists", f'{plural} "{meta["name"]}" already exists')
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if plural == "pods":
            default_pod_resources(obj)
        self._drop_fields(plural, obj)
        return self._store(plural, key, obj, "ADDED")

    def _drop_fields(self, plural: str, obj: Object) -> None:
        for dotted in self.dropped_fields.get(plural, ()):
            *path, last = dotted.split(".")
            holders: list[Any] = [obj]
            for part in path:
                many = part.endswith("[]")
                name = part.removesuffix("[]")
                found = [h.get(name) for h in holders if isinstance(h, dict)]
                holders = [i for f in found if isinstance(f, list) for i in f] if many else found
            for holder in holders:
                if isinstance(holder, dict):
                    holder.pop(last, None)

    def _existing(self, key: tuple[str, str | None, str]) -> Object:
        obj = self.objects.get(key)
        if obj is None:
            raise ApiStatusError(404, "NotFound", f'{key[0]} "{key[2]}" not found')
        return obj

    def _check_version(self, current: Object, wanted: Any, name: str) -> None:
        if wanted and str(wanted) != current["metadata"].get("resourceVersion"):
            raise ApiStatusError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )

    def _patch(self, key: tuple[str, str | None, str], body: Any, content_type: str) -> Object:
        current = self._existing(key)
        if "json-patch" in content_type:
            if not isinstance(body, list):
                raise ApiStatusError(400, "BadRequest", "a JSON patch must be a list")
            updated = json_patch(current, body)
        else:
            if not isinstance(body, dict):
                raise ApiStatusError(400, "BadRequest", "a merge patch must be an object")
            self._check_version(
                current, (body.get("metadata") or {}).get("resourceVersion"), key[2]
            )
            updated = merge_patch(current, body)
        meta = updated.setdefault("metadata", {})
        meta["name"] = key[2]
        meta["uid"] = current["metadata"]["uid"]
        return self._store(key[0], key, updated, "MODIFIED")

    def _replace(self, key: tuple[str, str | None, str], body: Any) -> Object:
        current = self._existing(key)
        if not isinstance(body, dict):
            raise ApiStatusError(400, "BadRequest", "the body must be a JSON object")
        self._check_version(current, (body.get("metadata") or {}).get("resourceVersion"), key[2])
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = current["metadata"]["uid"]
        obj["metadata"].setdefault(
            "creationTimestamp", current["metadata"].get("creationTimestamp")
        )
        self._drop_fields(key[0], obj)
        return self._store(key[0], key, obj, "MODIFIED")

    def _bind(self, key: tuple[str, str | None, str], body: Any) -> Object:
        # The rules of the real Binding subresource (research/k8s-apis.md §7.4).
        if not isinstance(body, dict):
            raise ApiStatusError(400, "BadRequest", "the body must be a Binding object")
        meta = body.get("metadata") or {}
        if meta.get("name") != key[2]:
            raise ApiStatusError(
                400, "BadRequest", "name in URL does not match name in Binding object"
            )
        target = body.get("target") or {}
        if target.get("kind") not in (None, "", "Node") or not target.get("name"):
            raise ApiStatusError(422, "Invalid", "target: a Node name is required")
        pod = self._existing(key)
        if meta.get("uid") and meta["uid"] != pod["metadata"]["uid"]:
            raise ApiStatusError(
                409, "Conflict", f"Precondition failed: UID in precondition: {meta['uid']}"
            )
        self._check_version(pod, meta.get("resourceVersion"), key[2])
        if pod["metadata"].get("deletionTimestamp"):
            raise ApiStatusError(
                409, "Conflict", f"pod {key[2]} is being deleted, cannot be assigned"
            )
        current_node = (pod.get("spec") or {}).get("nodeName")
        if current_node:
            raise ApiStatusError(
                409, "Conflict", f'pod {key[2]} is already assigned to node "{current_node}"'
            )
        updated = copy.deepcopy(pod)
        annotations = dict(meta.get("annotations") or {})
        if annotations:
            updated["metadata"].setdefault("annotations", {}).update(annotations)
        updated.setdefault("spec", {})["nodeName"] = target["name"]
        conditions = updated.setdefault("status", {}).setdefault("conditions", [])
        conditions.append({"type": "PodScheduled", "status": "True"})
        self._store("pods", key, updated, "MODIFIED")
        return status_object(201, "", "")

    async def wait_for(
        self, predicate: Callable[[], bool], timeout_s: float = 5.0, interval_s: float = 0.005
    ) -> None:
        """Poll *predicate* until it holds; TimeoutError after *timeout_s* (a test helper)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate():
            if loop.time() > deadline:
                raise TimeoutError("condition not met in time")
            await asyncio.sleep(interval_s)


#: Decimal SI suffixes by power of ten, as kube-apiserver writes a quantity's canonical form.
_DECIMAL_SUFFIXES = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def canonical_integer(value: Any) -> Any:
    """A plain whole number in kube-apiserver's canonical form, other values as given.

    The real server stores and returns every quantity canonically: the largest power of 1000
    that keeps the number whole becomes a suffix, so ``8000`` comes back (and reaches every
    webhook) as ``8k``. Only plain whole numbers are rewritten here, the form HAMi-style
    resources (``nvidia.com/gpumem: 8000``) are written in; ``16Gi`` or ``1.5`` pass as given.
    """
    text = str(value)
    if not re.fullmatch(r"[0-9]+", text):
        return value
    number, power = int(text), 0
    while number and number % 1000 == 0 and power < 18:
        number, power = number // 1000, power + 3
    return f"{number}{_DECIMAL_SUFFIXES[power]}"


def default_pod_resources(obj: Object) -> None:
    """What kube-apiserver does to a created pod's resources (tests/realcluster showed it):
    a container's limits stand for its missing requests, and whole numbers take their
    canonical form (:func:`canonical_integer`)."""
    spec = obj.get("spec") or {}
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            resources = container.get("resources")
            if not isinstance(resources, dict):
                continue
            limits = resources.get("limits")
            if isinstance(limits, dict) and limits:
                requests = resources.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, quantity in limits.items():
                        requests.setdefault(name, quantity)
            for kind in ("limits", "requests"):
                values = resources.get(kind)
                if isinstance(values, dict):
                    resources[kind] = {n: canonical_integer(v) for n, v in values.items()}


def node(
    name: str, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None
) -> Object:
    """A minimal Node object."""
    return {
        "metadata": {
            "name": name,
            "annotations": dict(annotations or {}),
            "labels": dict(labels or {}),
        },
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}},
    }


def pod(
    name: str,
    *,
    namespace: str = "default",
    limits: dict[str, str] | None = None,
    containers: Iterable[Object] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler_name: str | None = None,
    node_name: str | None = None,
    phase: str = "Pending",
) -> Object:
    """A minimal Pod object with one container (or the given *containers*)."""
    if containers is None:
        containers = [
            {"name": "main", "image": "busybox", "resources": {"limits": dict(limits or {})}}
        ]
    spec: Object = {"containers": list(containers)}
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
        "spec": spec,
        "status": {"phase": phase},
    }

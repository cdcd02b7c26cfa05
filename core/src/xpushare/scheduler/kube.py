"""The scheduler's only door to the API server, over the official client's asyncio API.

Why this shape: the issue mandates the official ``kubernetes`` client, and its
``kubernetes.aio`` package keeps every call on the event loop, next to the usage ledger, so
no thread ever touches scheduler state. Its ``*_without_preload_content`` methods give the
raw response: we read the JSON ourselves instead of building the client's pydantic models,
which costs milliseconds per pod list item and per watch event at cluster scale, and we map
failures to our own exceptions in one place (a client upgrade touches this module only).

The writes of every bind (the node's handoff, the Binding, the event) and the other object
calls go one layer lower, through the client's ``ApiClient.param_serialize`` (the same URL,
authentication and token refresh) and ``call_api``: the generated methods validate their
arguments with pydantic and turn a plain dict body into a model and back, about 0.3 ms of
the scheduler's 3-5 ms a pod (bench_throughput). Those requests are then sent on keep-alive
connections of our own (apiwrite.py: 310 to 64 us a call, both sides) unless a proxy or a
netrc file could matter. Lists and watches keep the generated methods: they run once per
relist, not once per pod.
"""

from __future__ import annotations

import builtins
import functools
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import orjson

from xpushare.codec import (
    DEFAULT_HANDOFF_NAMESPACE,
    HANDOFF_LEASE_LABEL,
    HANDOFF_LEASE_ROLE,
    handoff_lease_name,
)
from xpushare.errors import XpushareError
from xpushare.scheduler.apiwrite import ApiWriter, WireError, writer_for

log = logging.getLogger(__name__)

Resource = Literal[
    "nodes", "pods", "resourcequotas", "resourceclaims", "resourceslices", "handoffs"
]
Object = dict[str, Any]

#: Items per page of a list: the apiserver's own default chunk for informers (client-go
#: reflector uses 500) keeps a 50,000-pod relist from holding one huge response.
LIST_PAGE = 500


class KubeError(XpushareError):
    """A request to the API server failed; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str, *, what: str = "") -> None:
        text = f"{what}: " if what else ""
        super().__init__(
            f"{text}API server answered {status}: {message}" if status else f"{text}{message}"
        )
        self.status = status
        self.message = message


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Gone(KubeError):
    pass


def _error(status: int, body: bytes, what: str) -> KubeError:
    message = body.decode("utf-8", "replace")[:500]
    try:
        data = json.loads(body)
        if isinstance(data, dict) and data.get("message"):
            message = str(data["message"])
    except ValueError:
        pass
    cls = {404: NotFound, 409: Conflict, 410: Gone}.get(status, KubeError)
    return cls(status, message, what=what)


#: The environment aiohttp's ``trust_env`` reads (proxies, and the netrc file for credentials).
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "ws_proxy", "wss_proxy", "all_proxy")


#: Longest watch event read (one JSON line): the API server refuses requests over 3 MiB
#: and etcd values over 1.5 MiB, so an object's event is smaller; a longer line is not an
#: event, and the stream is given up (and the watch restarted) instead of buffered.
MAX_EVENT_BYTES = 4 * 1024 * 1024


async def _events(content: Any, what: str) -> AsyncIterator[Object]:
    """The JSON lines of a watch stream, read in chunks.

    Not ``readline()``: its longest line is twice the client's read buffer, a setting of
    the client library rather than ours, and a longer line raises a ``ValueError`` at the
    same event on every retry (the watch would never pass that pod). Here the bound is
    ours (:data:`MAX_EVENT_BYTES`, above any object the API server stores). Every
    failure of the stream (cut mid-event, closed without its last chunk, a line that is not
    an event) is raised as a :class:`KubeError` with status 0, which the informer retries
    from the last complete event it applied.
    """
    buffer = bytearray()
    while True:
        try:
            chunk = await content.readany()
        except Exception as exc:
            raise KubeError(0, f"stream broken: {type(exc).__name__}: {exc}", what=what) from exc
        if not chunk:
            if buffer.strip():
                raise KubeError(0, "stream ended in the middle of an event", what=what)
            return
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            if not line.strip():
                continue
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise KubeError(0, f"not a watch event: {exc}", what=what) from exc
            if not isinstance(event, dict):
                raise KubeError(0, "not a watch event: not a JSON object", what=what)
            yield event
        if len(buffer) > MAX_EVENT_BYTES:
            raise KubeError(
                0, f"a watch event over {MAX_EVENT_BYTES} bytes: not an object's", what=what
            )


def _environment_matters(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a proxy variable or a netrc file could change how the API server is reached."""
    env = os.environ if environ is None else environ
    names = {name.lower() for name, value in env.items() if value}
    if any(variable in names for variable in _PROXY_VARIABLES):
        return True
    netrc = env.get("NETRC") or str(Path(env.get("HOME") or "~").expanduser() / ".netrc")
    return Path(netrc).exists()


@dataclass(frozen=True)
class KubeSettings:
    kubeconfig: Path | None = None
    context: str | None = None
    server: str | None = None
    request_timeout_s: float = 10.0


def kube_settings(config: Any) -> KubeSettings:
    """The connection settings of a ``KubeConfig`` section (scheduler/config.py)."""
    return KubeSettings(
        kubeconfig=config.kubeconfig,
        context=config.context,
        server=config.server,
        request_timeout_s=config.request_timeout_s,
    )


class Kube:
    """The calls the scheduler makes, each returning plain JSON objects."""

    def __init__(self, api_client: Any, *, request_timeout_s: float = 10.0) -> None:
        from kubernetes.aio import client

        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        #: resource.k8s.io/v1: the claims and slices of DRA mode (scheduler/drabook.py).
        self._resource = client.ResourceV1Api(api_client)
        self._coordination = client.CoordinationV1Api(api_client)
        self._timeout = request_timeout_s
        #: The namespace of the nodes' handoff Leases (``bind.handoff_namespace``; the
        #: ``handoffs`` resource lists and watches it, handoffbook.py).
        self.handoff_namespace = DEFAULT_HANDOFF_NAMESPACE
        #: Object calls on connections of our own (apiwrite.py) unless a proxy or netrc
        #: could change how the server is reached: then the official transport does all.
        self._writer: ApiWriter | None = None
        configuration = getattr(api_client, "configuration", None)
        if configuration is not None and not _environment_matters():
            self._writer = writer_for(configuration, request_timeout_s)

    @classmethod
    async def connect(cls, settings: KubeSettings) -> Kube:
        """A client from a server URL, a kubeconfig, or the in-cluster service account."""
        from kubernetes.aio import client, config

        if settings.server:
            configuration = client.Configuration(host=settings.server.rstrip("/"))
        else:
            configuration = client.Configuration()
            try:
                if settings.kubeconfig is not None:
                    raise config.ConfigException("kubeconfig given")
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except config.ConfigException:
                try:
                    await config.load_kube_config(  # type: ignore[no-untyped-call]
                        config_file=str(settings.kubeconfig) if settings.kubeconfig else None,
                        context=settings.context,
                        client_configuration=configuration,
                    )
                except (config.ConfigException, OSError) as exc:
                    # One line for the operator, like the node agent's: the client's own
                    # error is a 66-line traceback ending in "current-context".
                    raise KubeError(
                        0,
                        f"cannot configure the Kubernetes client: {exc}. In a pod, mount the "
                        "service account token; elsewhere pass --kubeconfig (or set "
                        "KUBECONFIG) or --server",
                    ) from None
        if not _environment_matters():
            # With trust_env, aiohttp reads ~/.netrc and the proxy variables in a worker
            # thread on every request: two thread hops per API call, which on a busy loop
            # cost more than the call (GIL hand-offs; bench_throughput). Only when neither
            # exists can nothing they would say be lost.
            configuration.client_session_kwargs = {"trust_env": False}
        return cls(client.ApiClient(configuration), request_timeout_s=settings.request_timeout_s)

    async def close(self) -> None:
        if self._writer is not None:
            await self._writer.close()
        await self._api_client.close()

    # -- plumbing ------------------------------------------------------------------------------

    async def _json(self, call: Any, what: str, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self._timeout)
        try:
            response = await call(*args, **kwargs)
        except KubeError:
            raise
        except Exception as exc:  # connection refused, TLS, timeout, client-side validation
            raise KubeError(0, f"{type(exc).__name__}: {exc}", what=what) from exc
        return await self._answer(response, what)

    async def _call(
        self,
        method: str,
        path: str,
        what: str,
        *,
        body: Object | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One request for one object, its answer's JSON (see the module docstring)."""
        client = self._api_client
        try:
            verb, url, headers, _, _ = await client.param_serialize(
                method=method,
                resource_path=path,
                header_params={"Accept": "application/json", "Content-Type": content_type},
                auth_settings=["BearerToken"],
            )
        except Exception as exc:  # the token refresh failed
            raise KubeError(0, f"{type(exc).__name__}: {exc}", what=what) from exc
        writer = self._writer
        if writer is not None and writer.serves(url):
            data = orjson.dumps(body) if body is not None else None
            try:
                status, raw = await writer.request(verb, url, headers, data)
            except WireError as exc:
                raise KubeError(0, str(exc), what=what) from exc
            if status >= 300:
                raise _error(status, raw, what)
            return orjson.loads(raw) if raw else None
        try:
            response = await client.call_api(
                verb, url, headers, body, _request_timeout=self._timeout
            )
        except Exception as exc:  # connection refused, TLS, timeout
            raise KubeError(0, f"{type(exc).__name__}: {exc}", what=what) from exc
        return await self._answer(response.response, what)

    @staticmethod
    async def _answer(response: Any, what: str) -> Any:
        try:
            body = await response.read()
        except Exception as exc:
            raise KubeError(0, f"reading the answer failed: {exc}", what=what) from exc
        finally:
            response.release()
        if response.status >= 300:
            raise _error(response.status, body, what)
        return orjson.loads(body) if body else None

    # -- list and watch ------------------------------------------------------------------------

    def _lister(self, resource: Resource) -> Any:
        if resource == "nodes":
            return self._core.list_node_without_preload_content
        if resource == "resourcequotas":
            return self._core.list_resource_quota_for_all_namespaces_without_preload_content
        if resource == "resourceclaims":
            return self._resource.list_resource_claim_for_all_namespaces_without_preload_content
        if resource == "resourceslices":
            return self._resource.list_resource_slice_without_preload_content
        if resource == "handoffs":
            return functools.partial(
                self._coordination.list_namespaced_lease_without_preload_content,
                self.handoff_namespace,
                label_selector=f"{HANDOFF_LEASE_LABEL}={HANDOFF_LEASE_ROLE}",
            )
        return self._core.list_pod_for_all_namespaces_without_preload_content

    async def list(self, resource: Resource) -> tuple[list[Object], str]:
        """Every object of *resource* and the list's resourceVersion (paged)."""
        items: list[Object] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE}
            if token:
                kwargs["_continue"] = token
            page = await self._json(self._lister(resource), f"list {resource}", **kwargs)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        timeout_s: int,
        opened: Callable[[], None] | None = None,
    ) -> AsyncIterator[Object]:
        """Watch events after *resource_version* until the server ends the stream.

        An ``ERROR`` event is raised as the KubeError it carries (``Gone`` for 410).
        *opened* is called once the server has accepted the watch (before any event: a
        quiet cluster sends none for minutes).
        """
        what = f"watch {resource}"
        try:
            response = await self._lister(resource)(
                watch=True,
                resource_version=resource_version,
                timeout_seconds=timeout_s,
                allow_watch_bookmarks=True,
                _request_timeout=timeout_s + 30,
            )
        except Exception as exc:
            raise KubeError(0, f"{type(exc).__name__}: {exc}", what=what) from exc
        try:
            if response.status >= 300:
                raise _error(response.status, await response.read(), what)
            if opened is not None:
                opened()
            async for event in _events(response.content, what):
                if event.get("type") == "ERROR":
                    obj = event.get("object") or {}
                    code = obj.get("code") if isinstance(obj, dict) else None
                    status = code if isinstance(code, int) and 100 <= code < 600 else 500
                    raise _error(status, json.dumps(obj).encode()[:4096], what)
                yield event
        finally:
            response.release()

    # -- objects ---------------------------------------------------------------------------------

    async def get_pod(self, namespace: str, name: str) -> Object:
        result: Object = await self._call(
            "GET", _pod_path(namespace, name), f"get pod {namespace}/{name}"
        )
        return result

    async def get_handoff_lease(self, node: str) -> Object:
        """The node's handoff Lease (:class:`NotFound` when it has none yet)."""
        name = handoff_lease_name(node)
        result: Object = await self._call(
            "GET",
            _lease_path(self.handoff_namespace, name),
            f"get the handoff Lease {self.handoff_namespace}/{name} of node {node}",
        )
        return result

    async def create_handoff_lease(
        self, node: str, annotations: Mapping[str, str | None], *, owner_uid: str = ""
    ) -> Object:
        """Create the node's handoff Lease with *annotations* (:class:`Conflict` when it
        exists: another writer created it first). With *owner_uid* (the Node's uid) the
        garbage collector deletes it with the Node."""
        name = handoff_lease_name(node)
        meta: Object = {
            "name": name,
            "namespace": self.handoff_namespace,
            "labels": {HANDOFF_LEASE_LABEL: HANDOFF_LEASE_ROLE},
            "annotations": {k: v for k, v in annotations.items() if v is not None},
        }
        if owner_uid:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": owner_uid}
            ]
        result: Object = await self._call(
            "POST",
            _leases_path(self.handoff_namespace),
            f"create the handoff Lease {self.handoff_namespace}/{name} of node {node}",
            body={
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": meta,
                "spec": {"holderIdentity": node},
            },
        )
        return result

    async def patch_handoff_lease(
        self, node: str, annotations: Mapping[str, str | None], *, resource_version: str
    ) -> Object:
        """JSON merge patch of the node's handoff Lease's annotations, conditioned on
        *resource_version* (:class:`Conflict` when stale, :class:`NotFound` when gone)."""
        name = handoff_lease_name(node)
        result: Object = await self._call(
            "PATCH",
            _lease_path(self.handoff_namespace, name),
            f"patch the handoff Lease {self.handoff_namespace}/{name} of node {node}",
            body={
                "metadata": {"resourceVersion": resource_version, "annotations": dict(annotations)}
            },
            content_type=_MERGE_PATCH,
        )
        return result

    async def list_node_pods(self, node: str) -> builtins.list[Object]:
        """Every pod bound to *node*, read from the API server (a consistent read, paged).

        On the bind path (a node's first bind of a leader's term reads it, handoff.py), so it
        goes through :meth:`_call` and our own connections: through the official client's
        generated lister each page cost about 2 ms of the scheduler's CPU (its argument
        validation and model machinery; py-spy of bench_realcluster at 1,000 nodes), a
        sixth of the bind's."""
        items: builtins.list[Object] = []
        selector = quote(f"spec.nodeName={node}", safe="")
        token: str | None = None
        while True:
            path = f"/api/v1/pods?fieldSelector={selector}&limit={LIST_PAGE}"
            if token:
                path += f"&continue={quote(token, safe='')}"
            page = await self._call("GET", path, f"list pods on node {node}")
            if not isinstance(page, dict):
                raise KubeError(0, "the answer is not a list object", what=f"list pods on {node}")
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    async def patch_pod_labels(
        self, namespace: str, name: str, labels: Mapping[str, str | None]
    ) -> Object:
        """JSON merge patch of a pod's labels (None removes one); the pod afterwards."""
        result: Object = await self._call(
            "PATCH",
            _pod_path(namespace, name),
            f"patch pod {namespace}/{name}",
            body={"metadata": {"labels": dict(labels)}},
            content_type=_MERGE_PATCH,
        )
        return result

    async def list_labelled_pods(self, namespace: str, selector: str) -> builtins.list[Object]:
        """The pods of *namespace* matching the label *selector* (one page: a handful)."""
        page = await self._json(
            self._core.list_namespaced_pod_without_preload_content,
            f"list pods {selector} in {namespace}",
            namespace,
            label_selector=selector,
            limit=LIST_PAGE,
        )
        return list(page.get("items") or [])

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> Object:
        """JSON merge patch of a pod's annotations; the pod as it is afterwards."""
        result: Object = await self._call(
            "PATCH",
            _pod_path(namespace, name),
            f"patch pod {namespace}/{name}",
            body={"metadata": {"annotations": dict(annotations)}},
            content_type=_MERGE_PATCH,
        )
        return result

    async def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: Mapping[str, str],
        *,
        resource_version: str = "",
    ) -> None:
        """Bind a pod with its annotations in one write (research/k8s-apis.md §7.4).

        *uid* and *resource_version*, when given, are preconditions the API server checks in
        the same atomic update: a pod that changed since it was read gives :class:`Conflict`.
        """
        meta: Object = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if resource_version:
            meta["resourceVersion"] = resource_version
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self._call(
            "POST",
            _pod_path(namespace, name) + "/binding",
            f"bind pod {namespace}/{name} to node {node}",
            body=body,
        )

    async def list_pending_pods(self, limit: int = LIST_PAGE) -> builtins.list[Object]:
        """Up to *limit* pods bound to no node yet (one page: the web view's search)."""
        page = await self._json(
            self._lister("pods"), "list pending pods", limit=limit, field_selector="spec.nodeName="
        )
        return list(page.get("items") or [])

    async def list_pod_events(
        self, namespace: str, name: str, limit: int = 100
    ) -> builtins.list[Object]:
        """Up to *limit* events about the pod *namespace*/*name*."""
        page = await self._json(
            self._core.list_namespaced_event_without_preload_content,
            f"list events of pod {namespace}/{name}",
            namespace,
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}",
            limit=limit,
        )
        return list(page.get("items") or [])

    async def create_token_review(self, token: str) -> Object:
        """Ask the API server who *token* belongs to (authentication.k8s.io/v1 TokenReview)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        result: Object = await self._call(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            "create a TokenReview",
            body=body,
        )
        return result

    async def create_subject_access_review(self, spec: Object) -> Object:
        """Ask the API server whether a user may do something (SubjectAccessReview)."""
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        result: Object = await self._call(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            "create a SubjectAccessReview",
            body=body,
        )
        return result

    async def create_event(self, namespace: str, body: Object) -> None:
        await self._call(
            "POST",
            f"/api/v1/namespaces/{_part(namespace)}/events",
            f"create event in {namespace}",
            body=body,
        )

    # -- leases ------------------------------------------------------------------------------------

    async def get_lease(self, namespace: str, name: str) -> Object:
        result: Object = await self._call(
            "GET", _lease_path(namespace, name), f"get lease {namespace}/{name}"
        )
        return result

    async def create_lease(self, namespace: str, body: Object) -> Object:
        result: Object = await self._call(
            "POST", _leases_path(namespace), f"create lease in {namespace}", body=body
        )
        return result

    async def replace_lease(self, namespace: str, name: str, body: Object) -> Object:
        result: Object = await self._call(
            "PUT", _lease_path(namespace, name), f"update lease {namespace}/{name}", body=body
        )
        return result


_MERGE_PATCH = "application/merge-patch+json"


def _part(value: str) -> str:
    """A path segment: every character that is not unreserved escaped, ``/`` included."""
    return quote(value, safe="")


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{_part(name)}"


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{_part(namespace)}/pods/{_part(name)}"


def _leases_path(namespace: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{_part(namespace)}/leases"


def _lease_path(namespace: str, name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{_part(namespace)}/leases/{_part(name)}"

"""The node agent's only door to the Kubernetes API: its own node, and the pods bound to it.

Why a module of its own: the agent needs five calls (read its node, merge-patch its node's
annotations and labels, read a pod, list and watch the node's pods), and keeping them behind
the small :class:`NodeKube` protocol lets tests run the agent against a local fake API server
over HTTP, and plugin authors against an in-memory one (``xpushare.testing``).

Why urllib3 and raw JSON rather than the official ``kubernetes`` client: the client's package
imports all its generated models, about 11 MiB of RSS in the agent (20 MiB on its own; 142
MiB once ``CoreV1Api`` is touched), against the agent's 64 MiB budget (DESIGN.md §9), for
objects we read three fields of. urllib3 (the client's own transport, 2 MiB) does TLS and
connection pooling; in a pod the service account is read here (the token file again on
every request, since projected tokens rotate in place). Outside a pod the official kubeconfig
loader is imported on demand, so exec plugins and the rest of kubeconfig keep working where
memory does not matter.

Calls are blocking (urllib3), so each runs on a small thread pool of its own and the event
loop awaits it; every request has a timeout, so a hung API server cannot hold Allocate.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlencode

from xpushare.codec.keys import DEFAULT_HANDOFF_NAMESPACE, handoff_lease_name
from xpushare.errors import XpushareError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

JsonObject = dict[str, Any]

#: RFC 7386 JSON merge patch: a ``null`` deletes a key (research/k8s-apis.md §7.3).
MERGE_PATCH = "application/merge-patch+json"

#: Threads for API calls: Allocate, the inventory publisher and the release tracker's list of
#: the node's pods may each have one request in flight; more would only add memory (one
#: malloc arena per thread).
API_THREADS = 3

#: Longest line of a watch stream read: one event is one object, and the API server stores
#: objects of at most 1.5 MiB (etcd's request limit); 4 MiB leaves room for the envelope.
MAX_WATCH_LINE = 4 << 20

#: Bytes asked of the socket at a time while watching.
WATCH_READ = 64 << 10

#: Events buffered between the watch thread and the loop: the thread waits when the loop
#: falls behind, so a burst of deletions costs at most this many objects of memory.
WATCH_QUEUE = 64

#: What the service account of an in-cluster pod carries; its presence selects in-cluster auth.
_IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"

#: Where kubelet mounts a pod's service account token and the cluster's CA.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

USER_AGENT = "xpushare-node"


class KubeError(XpushareError):
    """A Kubernetes API call failed; the message names the call and what to check."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubeConflict(KubeError):
    """A compare-and-swap patch lost: the object changed since it was read (HTTP 409)."""


class NodeKube(Protocol):
    """What the node agent reads and writes in the API server, bound to one node."""

    node_name: str

    async def get_node(self) -> JsonObject:
        """The node object; :class:`KubeError` if it cannot be read."""
        ...

    async def patch_node(self, patch: JsonObject) -> JsonObject:
        """Apply a JSON merge patch to the node and return the node as it now is.

        With ``metadata.resourceVersion`` in the patch the API server applies it only to that
        version (:class:`KubeConflict` otherwise).
        """
        ...

    async def get_handoff(self) -> JsonObject | None:
        """This node's handoff Lease (``handoff.<node>`` in the handoff namespace), or
        ``None`` when the scheduler has not created it yet."""
        ...

    async def get_pod(self, namespace: str, name: str) -> JsonObject | None:
        """The pod, or ``None`` when it does not exist."""
        ...

    async def list_node_pods(self) -> list[JsonObject]:
        """Every pod bound to this node (``spec.nodeName``)."""
        ...


def _explain(status: int, what: str, body: bytes) -> KubeError:
    try:
        message = str(json.loads(body).get("message", ""))[:300]
    except (ValueError, AttributeError):
        message = body[:300].decode("utf-8", "replace")
    if status == 409:
        return KubeConflict(f"{what}: conflict (the object changed meanwhile): {message}", status)
    hint = {
        401: "the node agent's service account token was refused",
        403: "grant the node agent's service account this verb in its ClusterRole "
        "(get/patch nodes, get/list pods; in DRA mode ResourceSlices and ResourceClaims)",
        404: "it does not exist",
    }.get(status, "check the API server's health and the node agent's logs")
    return KubeError(f"{what}: HTTP {status}: {message or '(no message)'}; {hint}", status)


@dataclass(frozen=True)
class ApiEndpoint:
    """Where the API server is and how to authenticate to it."""

    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    #: The ``Authorization`` header value, asked before every request (tokens rotate).
    authorization: Callable[[], str | None] = lambda: None


def _in_cluster(env: Mapping[str, str]) -> ApiEndpoint:
    host, port = env[_IN_CLUSTER_ENV], env.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 service address
    token_path = Path(SERVICE_ACCOUNT_DIR) / "token"
    ca = Path(SERVICE_ACCOUNT_DIR) / "ca.crt"
    if not token_path.is_file() or not ca.is_file():
        raise KubeError(
            f"cannot configure the Kubernetes client: no service account token under "
            f"{SERVICE_ACCOUNT_DIR}; mount the pod's service account (automountServiceAccount"
            "Token) or pass --kubeconfig"
        )

    def bearer() -> str | None:
        # Re-read every time: projected tokens are rotated in place (about hourly).
        try:
            return "Bearer " + token_path.read_text().strip()
        except OSError:
            return None

    return ApiEndpoint(host=f"https://{host}:{port}", ca_file=str(ca), authorization=bearer)


def _from_kubeconfig(kubeconfig: str | None) -> ApiEndpoint:
    # Outside a pod only (a developer's machine, kubectl-style files with exec plugins):
    # the official loader is imported here, so an in-cluster agent never pays its memory.
    from kubernetes import config
    from kubernetes.client import Configuration

    configuration: Any = Configuration()
    loader: Any = config  # the loaders are untyped
    try:
        loader.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    except config.ConfigException as exc:
        raise KubeError(
            f"cannot configure the Kubernetes client: {exc}. In a pod, mount the service "
            "account token; elsewhere pass --kubeconfig or set KUBECONFIG."
        ) from exc
    return ApiEndpoint(
        host=str(configuration.host).rstrip("/"),
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=bool(configuration.verify_ssl),
        # Refreshes exec-plugin and file tokens as the official client does. The loader of
        # kubernetes >= 37 keeps the token under "BearerToken" (the generated client's auth
        # setting); asking only for the older "authorization" sent no token at all, which a
        # real API server answers as system:anonymous (tests/realcluster).
        authorization=lambda: (
            configuration.get_api_key_with_prefix("BearerToken")
            or configuration.get_api_key_with_prefix("authorization")
        ),
    )


class KubeClient:
    """:class:`NodeKube` over urllib3 with raw JSON (see the module docstring for why)."""

    def __init__(
        self,
        node_name: str,
        endpoint: ApiEndpoint,
        *,
        timeout_s: float = 3.0,
        handoff_namespace: str = DEFAULT_HANDOFF_NAMESPACE,
    ) -> None:
        import urllib3

        self.node_name = node_name
        self.handoff_namespace = handoff_namespace
        self.timeout_s = timeout_s
        self.endpoint = endpoint
        self._host = endpoint.host.rstrip("/")
        self._http: Any = urllib3.PoolManager(
            num_pools=2,
            maxsize=API_THREADS + 1,
            cert_reqs="CERT_REQUIRED" if endpoint.verify else "CERT_NONE",
            ca_certs=endpoint.ca_file,
            cert_file=endpoint.cert_file,
            key_file=endpoint.key_file,
        )
        self._pool = ThreadPoolExecutor(API_THREADS, thread_name_prefix="xpushare-kube")

    @classmethod
    def for_host(
        cls,
        node_name: str,
        host: str,
        *,
        timeout_s: float = 3.0,
        handoff_namespace: str = DEFAULT_HANDOFF_NAMESPACE,
    ) -> KubeClient:
        """A client of a plain-HTTP API server at *host* (tests, ``kubectl proxy``)."""
        return cls(
            node_name,
            ApiEndpoint(host=host.rstrip("/")),
            timeout_s=timeout_s,
            handoff_namespace=handoff_namespace,
        )

    @classmethod
    def from_environment(
        cls,
        node_name: str,
        *,
        kubeconfig: str | None = None,
        environ: Mapping[str, str] | None = None,
        timeout_s: float = 3.0,
        handoff_namespace: str = DEFAULT_HANDOFF_NAMESPACE,
    ) -> KubeClient:
        """In-cluster credentials in a pod, else *kubeconfig* (or ``$KUBECONFIG``/``~/.kube``)."""
        env = os.environ if environ is None else environ
        if kubeconfig is None and _IN_CLUSTER_ENV in env:
            endpoint = _in_cluster(env)
        else:
            endpoint = _from_kubeconfig(kubeconfig)
        return cls(node_name, endpoint, timeout_s=timeout_s, handoff_namespace=handoff_namespace)

    # -- NodeKube ----------------------------------------------------------------------------

    async def get_node(self) -> JsonObject:
        found = await self._call("GET", self._node_path(), what=f"read node {self.node_name}")
        if found is None:
            raise KubeError(
                f"node {self.node_name!r} does not exist: is NODE_NAME the pod's spec.nodeName?",
                404,
            )
        return found

    async def patch_node(self, patch: JsonObject) -> JsonObject:
        found = await self._call(
            "PATCH", self._node_path(), body=patch, what=f"patch node {self.node_name}"
        )
        if found is None:
            raise KubeError(f"node {self.node_name!r} does not exist", 404)
        return found

    async def get_handoff(self) -> JsonObject | None:
        return await self._call(
            "GET", self._handoff_path(), what=f"read the handoff Lease of node {self.node_name}"
        )

    async def get_pod(self, namespace: str, name: str) -> JsonObject | None:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        return await self._call("GET", path, what=f"read pod {namespace}/{name}")

    async def list_node_pods(self) -> list[JsonObject]:
        selector = f"spec.nodeName={self.node_name}"
        found = await self._call(
            "GET",
            "/api/v1/pods",
            query=[("fieldSelector", selector)],
            what=f"list pods of node {self.node_name}",
        )
        items = (found or {}).get("items") or []
        # Filter here too: a field selector is the server's courtesy, not a contract we
        # want a wrong answer from (and fake servers ignore it).
        return [
            p
            for p in items
            if isinstance(p, dict) and (p.get("spec") or {}).get("nodeName") == self.node_name
        ]

    async def list_node_pods_at(self) -> tuple[list[JsonObject], str]:
        """:meth:`list_node_pods` and the list's resourceVersion, to watch from."""
        found = await self._call(
            "GET",
            "/api/v1/pods",
            query=[("fieldSelector", f"spec.nodeName={self.node_name}")],
            what=f"list pods of node {self.node_name}",
        )
        found = found or {}
        items = [
            p
            for p in found.get("items") or []
            if isinstance(p, dict) and (p.get("spec") or {}).get("nodeName") == self.node_name
        ]
        return items, str((found.get("metadata") or {}).get("resourceVersion") or "")

    async def watch_node_pods(
        self, resource_version: str, timeout_s: int
    ) -> AsyncIterator[JsonObject]:
        """Pod events of this node after *resource_version*, until the server ends the watch.

        The stream is read by a thread of its own (urllib3 blocks) and handed over through a
        small queue; an ``ERROR`` event (410 Gone when the version is too old) is raised as
        :class:`KubeError` with its status, so the caller lists again.
        """
        selector = f"spec.nodeName={self.node_name}"
        what = f"watch pods of node {self.node_name}"
        async for event in self._watch(
            "GET",
            "/api/v1/pods",
            [("fieldSelector", selector), ("watch", "true")],
            what,
            resource_version,
            timeout_s,
        ):
            yield event

    async def _watch(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        what: str,
        resource_version: str,
        timeout_s: int,
    ) -> AsyncIterator[JsonObject]:
        """Events of the objects at *path* matching *query* (see :meth:`watch_node_pods`).

        The callers name the method, the path and ``("watch", "true")`` in the query
        themselves, so the chart's RBAC test (tests/deploy/apicalls.py) reads each watch
        where it is asked for.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[JsonObject | BaseException | None] = asyncio.Queue(WATCH_QUEUE)
        stop = False
        since = [("resourceVersion", resource_version)] if resource_version else []

        opened: list[Any] = []

        def put(item: JsonObject | BaseException | None) -> None:
            if stop or loop.is_closed():
                return
            with contextlib.suppress(RuntimeError, concurrent.futures.CancelledError):
                asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

        def read() -> None:
            try:
                response = self._open_stream(
                    method,
                    path,
                    [
                        *query,
                        ("allowWatchBookmarks", "true"),
                        ("timeoutSeconds", str(timeout_s)),
                        *since,
                    ],
                    timeout_s,
                )
                opened.append(response)
                try:
                    if not 200 <= response.status < 300:
                        put(_explain(int(response.status), what, bytes(response.read() or b"")))
                        return
                    # read1: what has arrived, not a full buffer (an event must not wait
                    # for the next ones); lines are cut here, each bounded.
                    pending = b""
                    while not stop:
                        chunk = response.read1(WATCH_READ)
                        if not chunk:
                            break
                        pending += chunk
                        *lines, pending = pending.split(b"\n")
                        if len(pending) > MAX_WATCH_LINE:
                            put(KubeError(f"{what}: an event longer than {MAX_WATCH_LINE} bytes"))
                            return
                        for line in lines:
                            if line.strip():
                                put(json.loads(line))
                finally:
                    response.release_conn()
            except Exception as exc:
                put(exc if isinstance(exc, KubeError) else KubeError(f"{what}: {exc}"))
            finally:
                put(None)

        # The watch blocks its thread for a whole stream, so it gets one of its own: a
        # daemon thread, which a process that is stopping does not wait for.
        threading.Thread(target=read, name="xpushare-watch", daemon=True).start()
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                if not isinstance(item, dict):
                    continue
                if item.get("type") == "ERROR":
                    obj = item.get("object") or {}
                    status = int(obj.get("code") or 500) if isinstance(obj, dict) else 500
                    raise KubeError(f"{what}: {str(obj)[:300]}", status)
                yield item
        finally:
            stop = True
            # Wake the thread out of its read (a stop must not wait for the server to end
            # the stream) and out of a wait on a full queue.
            for response in opened:
                with contextlib.suppress(Exception):
                    response.shutdown()
            while not queue.empty():
                queue.get_nowait()

    # -- DRA (resource.k8s.io/v1): the node's ResourceSlices and the claims it prepares ------

    async def list_resource_slices(self, driver: str | None = None) -> list[JsonObject]:
        """This node's ResourceSlices of *driver* (of every driver if ``None``)."""
        return (await self.list_resource_slices_at(driver))[0]

    async def list_resource_slices_at(
        self, driver: str | None = None
    ) -> tuple[list[JsonObject], str]:
        """:meth:`list_resource_slices` and the list's resourceVersion, to watch from."""
        found = await self._call(
            "GET",
            "/apis/resource.k8s.io/v1/resourceslices",
            query=[("fieldSelector", self._slice_selector(driver))],
            what=f"list ResourceSlices of node {self.node_name}",
        )
        found = found or {}
        version = str((found.get("metadata") or {}).get("resourceVersion") or "")
        return self._own_slices(found.get("items") or [], driver), version

    async def watch_resource_slices(
        self, driver: str, resource_version: str, timeout_s: int
    ) -> AsyncIterator[JsonObject]:
        """Events of this node's ResourceSlices of *driver* (as :meth:`watch_node_pods`)."""
        selector = self._slice_selector(driver)
        what = f"watch ResourceSlices of node {self.node_name}"
        async for event in self._watch(
            "GET",
            "/apis/resource.k8s.io/v1/resourceslices",
            [("fieldSelector", selector), ("watch", "true")],
            what,
            resource_version,
            timeout_s,
        ):
            yield event

    def _slice_selector(self, driver: str | None) -> str:
        selector = f"spec.nodeName={self.node_name}"
        return selector if driver is None else f"{selector},spec.driver={driver}"

    def _own_slices(self, items: list[Any], driver: str | None) -> list[JsonObject]:
        # Filtered here too, as for pods: the selector is the server's courtesy.
        return [
            s
            for s in items
            if isinstance(s, dict)
            and (s.get("spec") or {}).get("nodeName") == self.node_name
            and driver in (None, (s.get("spec") or {}).get("driver"))
        ]

    async def create_resource_slice(self, body: JsonObject) -> JsonObject:
        name = str((body.get("metadata") or {}).get("name"))
        found = await self._call(
            "POST",
            "/apis/resource.k8s.io/v1/resourceslices",
            body=body,
            what=f"create ResourceSlice {name}",
        )
        return found or {}

    async def replace_resource_slice(self, name: str, body: JsonObject) -> JsonObject:
        """PUT *body* over slice *name*; its ``metadata.resourceVersion`` is the precondition."""
        found = await self._call(
            "PUT",
            f"/apis/resource.k8s.io/v1/resourceslices/{quote(name, safe='')}",
            body=body,
            what=f"replace ResourceSlice {name}",
        )
        return found or {}

    async def delete_resource_slice(self, name: str) -> None:
        """Delete slice *name*; one already gone is fine."""
        try:
            await self._call(
                "DELETE",
                f"/apis/resource.k8s.io/v1/resourceslices/{quote(name, safe='')}",
                what=f"delete ResourceSlice {name}",
            )
        except KubeError as exc:
            if exc.status != 404:
                raise

    async def get_resource_claim(self, namespace: str, name: str) -> JsonObject | None:
        """The ResourceClaim, or ``None`` when it does not exist."""
        path = (
            f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace, safe='')}"
            f"/resourceclaims/{quote(name, safe='')}"
        )
        return await self._call("GET", path, what=f"read ResourceClaim {namespace}/{name}")

    # -- plumbing ----------------------------------------------------------------------------

    def _node_path(self) -> str:
        return f"/api/v1/nodes/{quote(self.node_name, safe='')}"

    def _handoff_path(self) -> str:
        return (
            f"/apis/coordination.k8s.io/v1/namespaces/{quote(self.handoff_namespace, safe='')}"
            f"/leases/{quote(handoff_lease_name(self.node_name), safe='')}"
        )

    async def _call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        body: JsonObject | None = None,
        query: list[tuple[str, str]] | None = None,
    ) -> JsonObject | None:
        loop = asyncio.get_running_loop()
        request: Callable[[], tuple[int, bytes]] = lambda: self._request(method, path, body, query)  # noqa: E731
        try:
            status, data = await loop.run_in_executor(self._pool, request)
        except KubeError:
            raise
        except Exception as exc:
            raise KubeError(f"{what}: {type(exc).__name__}: {exc}") from exc
        if status == 404 and method == "GET":
            return None
        if not 200 <= status < 300:
            raise _explain(status, what, data)
        try:
            decoded = json.loads(data)
        except ValueError as exc:
            raise KubeError(f"{what}: the API server answered with invalid JSON: {exc}") from exc
        if not isinstance(decoded, dict):
            raise KubeError(f"{what}: the API server answered with {type(decoded).__name__}")
        return decoded

    def _url(self, path: str, query: list[tuple[str, str]] | None) -> str:
        return self._host + path + (f"?{urlencode(query)}" if query else "")

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if content_type is not None:
            headers["Content-Type"] = content_type
        authorization = self.endpoint.authorization()
        if authorization:
            headers["Authorization"] = authorization
        return headers

    def _request(
        self,
        method: str,
        path: str,
        body: JsonObject | None,
        query: list[tuple[str, str]] | None,
    ) -> tuple[int, bytes]:
        import urllib3

        response = self._http.request(
            method,
            self._url(path, query),
            body=None if body is None else json.dumps(body).encode(),
            headers=self._headers(
                None if body is None else MERGE_PATCH if method == "PATCH" else "application/json"
            ),
            timeout=urllib3.Timeout(total=self.timeout_s),
            retries=False,
            redirect=False,
        )
        return int(response.status), bytes(response.data or b"")

    def _open_stream(
        self, method: str, path: str, query: list[tuple[str, str]], timeout_s: int
    ) -> Any:
        import urllib3

        return self._http.request(
            method,
            self._url(path, query),
            headers=self._headers(),
            # Connect bound as for every call; reads may wait for the whole watch.
            timeout=urllib3.Timeout(connect=self.timeout_s, read=timeout_s + 30),
            retries=False,
            redirect=False,
            preload_content=False,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.clear()

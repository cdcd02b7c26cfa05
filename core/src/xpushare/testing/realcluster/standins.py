"""Stand-ins for the parts of a cluster the tests do not run: a Service in front of scheduler
replicas (:class:`ReadyProxy`) and the node agents' release of a node's handoff
(:class:`HandoffReleaser`).
"""

from __future__ import annotations

import contextlib
import functools
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from xpushare.testing.realcluster.processes import STOP_WAIT_S, free_port
from xpushare.testing.realcluster.rawwatch import raw_watch


class _TcpProxy:
    """A loopback TCP proxy: each connection it accepts is joined to the upstream port
    :meth:`_pick` names (closed when it names none). TLS passes through untouched, so the
    upstream's certificate is what clients verify; a connection stays with the upstream it
    was opened to."""

    def __init__(self, name: str) -> None:
        import threading

        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name=name, daemon=True)
        self._thread.start()

    def _pick(self) -> int | None:
        raise NotImplementedError

    def _admit(self) -> bool:
        """Whether a connection just joined may stay (asked under the lock)."""
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(STOP_WAIT_S)
        self._server.close()
        self._close_connections()

    def _close_connections(self) -> None:
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()

    def _accept(self) -> None:
        import threading

        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        import threading

        port = self._pick()
        if port is None:
            client.close()
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        client.settimeout(None)
        with self._lock:
            if not self._admit():  # cut while connecting: this one is refused too
                client.close()
                upstream.close()
                return
            self._sockets += [client, upstream]
        for source, target in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, target), daemon=True).start()


class ReadyProxy(_TcpProxy):
    """A TCP proxy to whichever of *backends* answers ``/readyz`` with 200 (the leader): what
    the chart's Service, which selects the leader's pod by its ``xpushare.io/leader`` label,
    gives kube-scheduler and kube-apiserver in front of scheduler replicas. As with
    kube-proxy, a connection stays with the backend it was opened to; only new connections
    follow the leader.
    """

    #: How long a new connection waits for some backend to be ready before it is closed.
    PICK_WAIT_S = 10.0

    def __init__(self, backends: list[str], ca_file: Path) -> None:
        self.backends = list(backends)
        self.context = ssl.create_default_context(cafile=str(ca_file))
        super().__init__("ready-proxy")

    def ready_backend(self) -> str | None:
        """The first backend whose /readyz answers 200 now."""
        for url in self.backends:
            try:
                with urllib.request.urlopen(
                    f"{url}/readyz", timeout=0.5, context=self.context
                ) as answer:
                    if answer.status == 200:
                        return url
            except (urllib.error.URLError, OSError):
                continue
        return None

    def _pick(self) -> int | None:
        deadline = time.monotonic() + self.PICK_WAIT_S
        url = self.ready_backend()
        while url is None and time.monotonic() < deadline and not self._stop.is_set():
            time.sleep(0.1)
            url = self.ready_backend()
        return None if url is None else int(url.rsplit(":", 1)[1])


class CutProxy(_TcpProxy):
    """A TCP proxy to one upstream (kube-apiserver's port) that can be cut: :meth:`cut`
    closes every connection at once, dropping what was in flight, and refuses new ones until
    :meth:`heal`. A network partition between one client and the API server, with the
    server and every other client untouched: what the client's watches saw last is what it
    resumes from.

    Why not the :class:`~xpushare.testing.watchproxy.WatchProxy`: it reads HTTP, and a real
    kube-apiserver speaks TLS only; cutting whole connections needs no HTTP.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.is_cut = False
        super().__init__("cut-proxy")

    def cut(self) -> None:
        with self._lock:
            self.is_cut = True
        self._close_connections()

    def heal(self) -> None:
        self.is_cut = False

    def _pick(self) -> int | None:
        return None if self.is_cut else self.upstream_port

    def _admit(self) -> bool:
        return not self.is_cut


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class HandoffReleaser:
    """Plays the node agents: releases a node's handoff once its pod is bound there.

    Why: /bind hands each pod to its node's agent through the ``xpushare.io/handoff``
    annotation of the node's handoff Lease (``handoff.<node>`` in *namespace*) and waits for
    the previous one to be released before binding the next pod to that node (DESIGN.md §6).
    No kubelet runs here, so no agent would ever allocate; this removes the annotation (a
    JSON patch that tests its value first, so a newer handoff is never taken away) once the
    pod it names is bound to the node, as an agent does after kubelet's Allocate.
    ``served`` lists the (node, pod) pairs it released.

    It follows two watches (:func:`~xpushare.testing.realcluster.rawwatch.raw_watch`), of the
    handoff Leases (of *nodes* only, when given) and of the bound pods, read as raw JSON: in the
    benchmark (benchmarks/bench_realcluster.py) this stand-in shares the cores with the
    control plane and our scheduler, and an earlier one, which let the Kubernetes client
    build model objects of every event and polled each pod every 10 ms, spent some 40 ms of
    CPU a pod there, more than any real component (2026-12-06).
    """

    #: Seconds a watch stream lasts before it is resumed: the bound of stopping.
    WATCH_S = 1

    #: How long a handoff's pod may take to be bound after the handoff is written (/bind
    #: writes the handoff, then the Binding): beyond it the handoff is left to expire.
    BIND_WAIT_S = 30.0

    #: Seconds the end waits for handoffs seen and not released yet (watch events and a
    #: patch are milliseconds; a handoff whose pod is never bound costs the end this much).
    DRAIN_S = 2.0

    def __init__(
        self, core: Any, nodes: set[str] | None = None, workers: int = 4, *, namespace: str
    ) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        from kubernetes import client

        self.core = core
        self.leases = client.CoordinationV1Api(core.api_client)
        self.namespace = namespace
        self.nodes = None if nodes is None else set(nodes)
        self.served: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        #: Handoffs not released yet, by the pod they name: (node, raw value, written at).
        self._waiting: dict[tuple[str, str, str], tuple[str, str, float]] = {}
        #: Handoffs released or being released (their raw values), so a node event seen
        #: again does not release twice.
        self._done: set[str] = set()
        #: Where each pod seen bound is: (namespace, name, uid) -> node.
        self._bound: dict[tuple[str, str, str], str] = {}
        #: Releases submitted and not finished.
        self._releasing = 0
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="handoff-release")
        self._threads = [
            threading.Thread(target=self._follow, args=(kind,), name=f"handoff-{kind}", daemon=True)
            for kind in ("leases", "pods")
        ]

    def __enter__(self) -> HandoffReleaser:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # A handoff seen but not released yet (its pod's bind event, or its patch, still on
        # the way) is given DRAIN_S: a test that saw its last pod bound expects it served.
        deadline = time.monotonic() + self.DRAIN_S
        while time.monotonic() < deadline:
            with self._lock:
                if not self._waiting and not self._releasing:
                    break
            time.sleep(0.02)
        self._stop.set()
        for thread in self._threads:
            thread.join(STOP_WAIT_S)
        self._pool.shutdown(wait=True)  # the releases queued still run: one patch each

    def _follow(self, kind: str) -> None:
        if kind == "leases":
            from xpushare.codec import HANDOFF_LEASE_LABEL, HANDOFF_LEASE_ROLE

            raw_watch(
                functools.partial(self.leases.list_namespaced_lease, self.namespace),
                self._lease_event,
                self._stop,
                timeout_s=self.WATCH_S,
                label_selector=f"{HANDOFF_LEASE_LABEL}={HANDOFF_LEASE_ROLE}",
            )
        else:
            # Bound pods only: a pod enters this selection (ADDED) when its Binding lands,
            # which is all a node agent waits for; the creates are half the pod events.
            raw_watch(
                self.core.list_pod_for_all_namespaces,
                self._pod_event,
                self._stop,
                timeout_s=self.WATCH_S,
                field_selector="spec.nodeName!=",
            )

    def _lease_event(self, kind: str, lease: dict[str, Any], meta: dict[str, Any]) -> None:
        if kind != "DELETED":
            self._lease_seen(lease, meta)

    def _pod_event(self, kind: str, pod: dict[str, Any], meta: dict[str, Any]) -> None:
        if kind != "DELETED":
            self._pod_seen(pod, meta)

    def _lease_seen(self, lease: dict[str, Any], meta: dict[str, Any]) -> None:
        from xpushare.codec import HANDOFF_KEY, decode_handoff

        name = (lease.get("spec") or {}).get("holderIdentity") or ""
        raw = (meta.get("annotations") or {}).get(HANDOFF_KEY)
        if raw is None or (self.nodes is not None and name not in self.nodes):
            return
        handoff = decode_handoff(raw, node=name)
        pod = (handoff.pod.namespace, handoff.pod.name, handoff.pod.uid)
        with self._lock:
            if handoff.complete() or raw in self._done:
                return
            self._forget_expired()
            bound = self._bound_node(pod)
            if bound != name:
                self._waiting[pod] = (name, raw, time.monotonic())
                return
            self._done.add(raw)
            self._releasing += 1
        self._pool.submit(self._release, name, raw, pod[1])

    def _pod_seen(self, pod: dict[str, Any], meta: dict[str, Any]) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        key = (meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""))
        with self._lock:
            self._bound[key] = node
            waiting = self._waiting.pop(key, None) or self._waiting.pop((*key[:2], ""), None)
            if waiting is None or waiting[0] != node or waiting[1] in self._done:
                return
            self._done.add(waiting[1])
            self._releasing += 1
        self._pool.submit(self._release, node, waiting[1], key[1])

    def _bound_node(self, pod: tuple[str, str, str]) -> str | None:
        if pod[2]:
            return self._bound.get(pod)
        # A handoff without the pod's UID: any pod of that name.
        return next((n for k, n in self._bound.items() if k[:2] == pod[:2]), None)

    def _forget_expired(self) -> None:
        cutoff = time.monotonic() - self.BIND_WAIT_S
        for pod in [p for p, w in self._waiting.items() if w[2] < cutoff]:
            del self._waiting[pod]  # never bound: the scheduler repairs it

    def _release(self, name: str, raw: str, pod: str) -> None:
        try:
            self._patch(name, raw, pod)
        finally:
            with self._lock:
                self._releasing -= 1

    def _patch(self, name: str, raw: str, pod: str) -> None:
        from kubernetes.client.exceptions import ApiException

        from xpushare.codec import HANDOFF_KEY, handoff_lease_name

        path = "/metadata/annotations/" + HANDOFF_KEY.replace("~", "~0").replace("/", "~1")
        test = {"op": "test", "path": path, "value": raw}
        deadline = time.monotonic() + self.BIND_WAIT_S
        # Tried once even when stopping (a release queued at the end still runs); tried
        # again after a failed connection only until then.
        while True:
            try:
                # Not a V1Lease: without preloaded content the client answers the response.
                response: Any = self.leases.patch_namespaced_lease(
                    handoff_lease_name(name),
                    self.namespace,
                    [test, {"op": "remove", "path": path}],
                    _preload_content=False,
                )
                response.read()
            except ApiException:
                return  # already replaced (the test failed): not ours to release
            except Exception:  # the API server restarting: try again
                if self._stop.is_set() or time.monotonic() >= deadline:
                    return
                self._stop.wait(0.1)
                continue
            self.served.append((name, pod))
            return

"""Stand-ins for the parts of a cluster the tests do not run: a Service in front of scheduler
replicas (:class:`ReadyProxy`) and the node agents' release of a node's handoff
(:class:`HandoffReleaser`).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from xpushare.testing.realcluster.processes import STOP_WAIT_S, free_port


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
    annotation and waits for the previous one to be released before binding the next pod
    to that node (DESIGN.md §6). No kubelet runs here, so no agent would ever allocate; this
    removes the annotation (a JSON patch that tests its value first, so a newer handoff is
    never taken away) once the pod it names is bound to the node, as an agent does after
    kubelet's Allocate. It follows a watch of the nodes (of *nodes* only, when given), so it
    keeps up with thousands of nodes; ``served`` lists the (node, pod) pairs it released.
    """

    #: Seconds a watch stream lasts before it is resumed: the bound of stopping.
    WATCH_S = 1

    #: How long a handoff's pod may take to be bound after the handoff is written (/bind
    #: writes the handoff, then the Binding): beyond it the handoff is left to expire.
    BIND_WAIT_S = 30.0

    def __init__(self, core: Any, nodes: set[str] | None = None, workers: int = 8) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.core = core
        self.nodes = None if nodes is None else set(nodes)
        self.served: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="handoff-release")
        self._thread = threading.Thread(target=self._watch, name="handoff-watch", daemon=True)

    def __enter__(self) -> HandoffReleaser:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(STOP_WAIT_S)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _watch(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        version = ""
        while not self._stop.is_set():
            stream = watch.Watch()  # type: ignore[no-untyped-call]
            options: dict[str, Any] = {"timeout_seconds": self.WATCH_S}
            if version:
                options["resource_version"] = version
            try:
                for event in stream.stream(self.core.list_node, **options):  # type: ignore[no-untyped-call]
                    node = event["object"]
                    version = node.metadata.resource_version or version
                    self._seen(node)
            except ApiException as exc:
                if exc.status == 410:
                    version = ""  # compacted: start again from the current nodes
                else:
                    self._stop.wait(0.1)
            except Exception:  # the API server restarting: try again
                self._stop.wait(0.1)

    def _seen(self, node: Any) -> None:
        from xpushare.codec import HANDOFF_KEY, decode_handoff

        name = node.metadata.name
        raw = (node.metadata.annotations or {}).get(HANDOFF_KEY)
        if raw is None or (self.nodes is not None and name not in self.nodes):
            return
        handoff = decode_handoff(raw, node=name)
        with self._lock:
            if handoff.complete() or raw in self._pending:
                return
            self._pending.add(raw)
        self._pool.submit(self._release, name, raw, handoff)

    def _release(self, name: str, raw: str, handoff: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        from xpushare.codec import HANDOFF_KEY

        deadline = time.monotonic() + self.BIND_WAIT_S
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                try:
                    pod = self.core.read_namespaced_pod(handoff.pod.name, handoff.pod.namespace)
                except ApiException as exc:
                    if exc.status == 404:
                        return  # deleted before it was bound: the scheduler repairs it
                    pod = None
                except Exception:
                    pod = None
                uid_ok = pod is not None and (
                    not handoff.pod.uid or pod.metadata.uid == handoff.pod.uid
                )
                if uid_ok and pod.spec.node_name == name:
                    path = "/metadata/annotations/" + HANDOFF_KEY.replace("~", "~0").replace(
                        "/", "~1"
                    )
                    test = {"op": "test", "path": path, "value": raw}
                    with contextlib.suppress(ApiException):  # already replaced: not ours
                        self.core.patch_node(name, [test, {"op": "remove", "path": path}])
                        self.served.append((name, handoff.pod.name))
                    return
                self._stop.wait(0.01)
        finally:
            with self._lock:
                self._pending.discard(raw)

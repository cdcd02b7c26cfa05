"""Stand-ins for the parts of a cluster the tests do not run: a Service in front of scheduler
replicas (:class:`ReadyProxy`), a cut connection (:class:`CutProxy`) and kubelet's admission of
a bound pod (:class:`KubeletStandin`).
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


class KubeletStandin:
    """Plays kubelet's admission of each pod bound to *nodes* (every node when ``None``): its
    first status write, ``status.startTime``, once the pod's Binding has landed.

    Why: /bind hands each pod to its node's agent through the node's handoff Lease and waits
    until the previous handoff has served before it binds the next pod there (DESIGN.md §6).
    A handoff has served when kubelet has admitted its pod, every Allocate of it behind it,
    which kubelet's first status write after admission shows (``status.startTime``). No
    kubelet runs here, so this writes it, as a JSON patch of ``pods/status``. The
    benchmark (benchmarks/bench_realcluster.py) runs it in both phases, as every cluster has
    kubelets whether or not xpushare runs. ``admitted`` lists the (node, pod) pairs written.

    It follows one watch of the bound pods (:func:`.rawwatch.raw_watch`), read as raw
    JSON: in the benchmark this stand-in shares the cores with the control plane and our
    scheduler, and an earlier stand-in, which let the Kubernetes client build model objects of
    every event and polled each pod every 10 ms, spent some 40 ms of CPU a pod there, more
    than any real component (2026-12-06).
    """

    #: Seconds a watch stream lasts before it is resumed: the bound of stopping.
    WATCH_S = 1

    #: How long a status write is tried again while the API server does not answer.
    WRITE_WAIT_S = 30.0

    #: Seconds the end waits for pods seen bound and not written yet (a watch event and a
    #: patch are milliseconds).
    DRAIN_S = 2.0

    def __init__(self, core: Any, nodes: set[str] | None = None, workers: int = 4) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.core = core
        self.nodes = None if nodes is None else set(nodes)
        self.admitted: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        #: Pods written or being written, by uid: an event seen again writes nothing.
        self._done: set[str] = set()
        #: Writes submitted and not finished.
        self._writing = 0
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="kubelet-standin")
        self._thread = threading.Thread(target=self._follow, name="kubelet-standin", daemon=True)

    def __enter__(self) -> KubeletStandin:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # A write on the way is given DRAIN_S: a test that saw its last pod bound expects it
        # admitted.
        deadline = time.monotonic() + self.DRAIN_S
        while time.monotonic() < deadline:
            with self._lock:
                if not self._writing:
                    break
            time.sleep(0.02)
        self._stop.set()
        self._thread.join(STOP_WAIT_S)
        self._pool.shutdown(wait=True)  # the writes queued still run: one patch each

    def _follow(self) -> None:
        # Bound pods only: a pod enters this selection (ADDED) when its Binding lands, which
        # is when kubelet sees it; the creates are half the pod events.
        raw_watch(
            self.core.list_pod_for_all_namespaces,
            self._pod_event,
            self._stop,
            timeout_s=self.WATCH_S,
            field_selector="spec.nodeName!=",
        )

    def _pod_event(self, kind: str, pod: dict[str, Any], meta: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        node = (pod.get("spec") or {}).get("nodeName") or ""
        status = pod.get("status") or {}
        uid = meta.get("uid") or ""
        if not node or (self.nodes is not None and node not in self.nodes):
            return
        if status.get("startTime") or meta.get("deletionTimestamp"):
            return
        with self._lock:
            if uid in self._done:
                return
            self._done.add(uid)
            self._writing += 1
        self._pool.submit(self._admit, node, meta.get("namespace", ""), meta.get("name", ""))

    def _admit(self, node: str, namespace: str, name: str) -> None:
        try:
            if self._write(namespace, name):
                self.admitted.append((node, name))
        finally:
            with self._lock:
                self._writing -= 1

    def _write(self, namespace: str, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        deadline = time.monotonic() + self.WRITE_WAIT_S
        # Tried once even when stopping (a write queued at the end still runs); tried again
        # after a failed connection only until then.
        while True:
            try:
                # Not a V1Pod: without preloaded content the client answers the response.
                # A JSON patch (a list): the client sends a dict as one too.
                response: Any = self.core.patch_namespaced_pod_status(
                    name,
                    namespace,
                    [{"op": "add", "path": "/status/startTime", "value": now}],
                    _preload_content=False,
                )
                response.read()
            except ApiException:
                return False  # deleted meanwhile: kubelet has nothing to write
            except Exception:  # the API server restarting: try again
                if self._stop.is_set() or time.monotonic() >= deadline:
                    return False
                self._stop.wait(0.1)
                continue
            return True

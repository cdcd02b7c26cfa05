"""etcd, kube-apiserver and kube-controller-manager on loopback; kube-scheduler and our
scheduler on demand.

Why: the flags, the order and the waits that make these binaries a working control plane in a
test (TLS with a client CA, service-account keys, Node,RBAC, the admission plugins our webhook
and policy need, the controllers our flows need and none that would taint nodes without a
kubelet) are the hard part, written once here; the package docstring shows the use.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from xpushare.testing.realcluster.pki import Pki
from xpushare.testing.realcluster.processes import (
    STOP_WAIT_S,
    Component,
    Started,
    free_port,
    start_process,
    wait_url,
    write_kubeconfig,
)

#: Bound of one call to etcd's gateway on loopback (answers within milliseconds).
ETCD_CALL_S = 10.0

#: The binaries ``scripts/kube-binaries`` builds, in start order; the last is our fake
#: container runtime (tools/kube/fakeruntime), which the tests' kubelets talk to.
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "fake-runtime",
)

#: Controllers the tests need: tokens for our ServiceAccounts (the chart's RBAC is proven with
#: them), the ``default`` ServiceAccount the ServiceAccount admission plugin requires before it
#: admits a pod, claims from ResourceClaimTemplates (DRA), and the deletion of namespaces and
#: owned objects. Not the node lifecycle controller: no kubelet renews our nodes' Leases, so it
#: would taint every node unreachable after its grace period.
CONTROLLERS = (
    "serviceaccount-token-controller",
    "serviceaccount-controller",
    "resourceclaim-controller",
    "namespace-controller",
    "garbage-collector-controller",
)

#: Admission plugins beyond kube-apiserver's defaults, named so a change of defaults cannot
#: silently drop the ones our webhook and policy depend on.
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "ServiceAccount",
    "NodeRestriction",
    "DefaultTolerationSeconds",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ResourceQuota",
)

Object = dict[str, Any]


def _etcd_call(base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST *body* to etcd's JSON gateway at *path*; its answer."""
    request = urllib.request.Request(
        f"{base}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=ETCD_CALL_S) as answer:
        found: dict[str, Any] = json.loads(answer.read())
    return found


def binaries_missing(folder: Path) -> list[str]:
    """The names of :data:`BINARIES` not present (or not executable) in *folder*."""
    return [name for name in BINARIES if not os.access(folder / name, os.X_OK)]


class ControlPlane(Started):
    """etcd, kube-apiserver and kube-controller-manager; kube-scheduler on demand.

    *binaries* is the folder ``scripts/kube-binaries`` printed; *work* an empty folder for the
    certificates, etcd's data, configs and the components' logs. :attr:`started_s` is how long
    the start took (printed, so a slow machine is visible in the test output).
    """

    def __init__(self, binaries: Path, work: Path, *, apiserver_args: Sequence[str] = ()) -> None:
        missing = binaries_missing(binaries)
        if missing:
            raise FileNotFoundError(
                f"{', '.join(missing)} missing in {binaries}: run scripts/kube-binaries"
            )
        self.binaries = binaries
        self.work = work
        #: Flags added to kube-apiserver's own (``--watch-cache=false`` for a fault test that
        #: needs its watches served by etcd).
        self.apiserver_args = tuple(apiserver_args)
        self.logs = work / "logs"
        self.components: list[Component] = []
        self.etcd_url = ""
        self.url = ""
        self.started_s = 0.0
        self.pki: Pki | None = None
        #: The admin kubeconfig (client certificate in group system:masters).
        self.admin_kubeconfig = work / "admin.kubeconfig"
        self._admin_cert: tuple[Path, Path] | None = None
        self._clients: list[Any] = []
        self._closers: list[Any] = []

    def on_stop(self, close: Any) -> None:
        """Call *close()* when the control plane stops, before its components end (a proxy
        or a thread of a test that talks to it)."""
        self._closers.append(close)

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        started = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        pki = self.pki = Pki.create(self.work / "pki")
        self._start_etcd()
        self._start_apiserver(pki)
        self._admin_cert = pki.issue(
            "admin", common_name="xpushare-test-admin", organizations=("system:masters",)
        )
        write_kubeconfig(
            self.admin_kubeconfig, self.url, pki.ca_cert, cert=self._admin_cert, user="admin"
        )
        self._start_controller_manager(pki)
        self.started_s = time.monotonic() - started
        print(
            f"realcluster: etcd, kube-apiserver and kube-controller-manager up in "
            f"{self.started_s:.1f} s at {self.url} (logs in {self.logs})",
            file=sys.stderr,
        )

    def stop(self) -> None:
        """End every component, newest first (the API server outlives its clients)."""
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                close()
        self._closers.clear()
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
        for component in reversed(self.components):
            component.stop()
        self.components.clear()

    def restart_apiserver(self, *, kill: bool = True) -> float:
        """Kill (SIGKILL; SIGTERM when not *kill*) kube-apiserver and start it again with the
        same flags and port, as a crashed or upgraded control plane does; returns the seconds
        it was away (until /readyz answered again). Its clients must reconnect on their own."""
        index = next(i for i, c in enumerate(self.components) if c.name == "kube-apiserver")
        old = self.components[index]
        args = [str(a) for a in old.process.args]  # type: ignore[union-attr]
        started = time.monotonic()
        if kill:
            old.process.kill()
            old.process.wait(STOP_WAIT_S)
        old.stop()
        new = start_process("kube-apiserver", args, self.logs)
        self.components[index] = new
        assert self.pki is not None
        wait_url(new, f"{self.url}/readyz", self.pki.ca_cert)
        return time.monotonic() - started

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (physically, as kube-apiserver's
        own compaction every 5 minutes does) and return that revision: a watch resumed from
        any older resourceVersion is then answered 410 Gone where etcd serves it.

        Through etcd's JSON gateway (``/v3/kv/range`` for the revision, ``/v3/kv/compaction``),
        which the etcd we build serves on its client URL: no etcdctl to build."""
        header = _etcd_call(self.etcd_url, "/v3/kv/range", {"key": "AA==", "limit": 1})
        revision = int(header["header"]["revision"])
        _etcd_call(self.etcd_url, "/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    @property
    def admin_cert(self) -> tuple[Path, Path]:
        """The admin's client certificate and key files (group system:masters)."""
        assert self._admin_cert is not None, "the control plane is not started"
        return self._admin_cert

    def component(self, name: str) -> Component:
        for component in self.components:
            if component.name == name:
                return component
        raise KeyError(f"no component {name} is running")

    # -- the components ----------------------------------------------------------------------

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        args = [
            str(self.binaries / "etcd"),
            "--name=test",
            f"--data-dir={self.work / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}",
            # A test's data is thrown away: fsync only costs the shared disk.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]
        etcd = start_process("etcd", args, self.logs)
        self.components.append(etcd)
        wait_url(etcd, f"{self.etcd_url}/health", None)

    def _start_apiserver(self, pki: Pki) -> None:
        port = free_port()
        self.url = f"https://127.0.0.1:{port}"
        serving = pki.issue(
            "apiserver",
            common_name="kube-apiserver",
            hosts=("127.0.0.1", "localhost", "kubernetes.default.svc"),
        )
        args = [
            str(self.binaries / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--cert-dir={self.work / 'apiserver-certs'}",
            f"--tls-cert-file={serving[0]}",
            f"--tls-private-key-file={serving[1]}",
            f"--client-ca-file={pki.ca_cert}",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--allow-privileged=true",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            # No "kubernetes" Service endpoint to keep pointed at a loopback address.
            "--endpoint-reconciler-type=none",
            "--v=1",
            *self.apiserver_args,
        ]
        apiserver = start_process("kube-apiserver", args, self.logs)
        self.components.append(apiserver)
        wait_url(apiserver, f"{self.url}/readyz", pki.ca_cert)

    def _start_controller_manager(self, pki: Pki) -> None:
        args = [
            str(self.binaries / "kube-controller-manager"),
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_cert}",
            "--leader-elect=false",
            # No serving port: several test runs share a machine and its default port.
            "--secure-port=0",
            "--v=1",
        ]
        self.components.append(start_process("kube-controller-manager", args, self.logs))

    def start_scheduler(
        self,
        config: Object,
        *,
        kubeconfig: Path | None = None,
        name: str = "kube-scheduler",
        pprof_port: int | None = None,
    ) -> Component:
        """Start kube-scheduler with the KubeSchedulerConfiguration *config*, its
        ``clientConnection.kubeconfig`` set to *kubeconfig* (default: the admin's; with
        ``--config`` kube-scheduler ignores ``--kubeconfig``). Returns when its process is
        running; it is ready once it holds its Lease, which a test sees as pods scheduled.
        With *pprof_port* it serves Go's profiles (``/debug/pprof/``) there, over TLS, to
        anyone: a benchmark's profile of the real scheduler (benchmarks/bench_realcluster.py)."""
        config = {
            **config,
            "clientConnection": {
                **(config.get("clientConnection") or {}),
                "kubeconfig": str(kubeconfig or self.admin_kubeconfig),
            },
        }
        path = self.work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        args = [
            str(self.binaries / "kube-scheduler"),
            f"--config={path}",
            "--v=2",
        ]
        if pprof_port is None:
            args.append("--secure-port=0")
        else:
            args += [
                f"--secure-port={pprof_port}",
                "--bind-address=127.0.0.1",
                "--authorization-always-allow-paths=/debug/pprof,/debug/pprof/*",
                "--authentication-skip-lookup=true",
            ]
        component = start_process(name, args, self.logs)
        self.components.append(component)
        return component

    def apply(self, objects: list[Object]) -> list[Object]:
        """Create each of *objects* (as ``kubectl create`` would: the API server validates
        every field, RBAC escalation checks included); the stored objects. Any refusal
        raises, naming the object and the API server's message."""
        from kubernetes import dynamic
        from kubernetes.dynamic.exceptions import DynamicApiError

        client = dynamic.DynamicClient(self.api_client())  # type: ignore[no-untyped-call]
        stored: list[Object] = []
        for obj in objects:
            body = {k: v for k, v in obj.items() if not k.startswith("__")}
            kind, name = body["kind"], body["metadata"]["name"]
            resource = client.resources.get(api_version=body["apiVersion"], kind=kind)
            namespace = body["metadata"].get("namespace") if resource.namespaced else None
            try:
                answer = resource.create(body=body, namespace=namespace)
            except DynamicApiError as exc:
                summary = exc.summary()  # type: ignore[no-untyped-call]
                where = f"{namespace}/{name}" if namespace else name
                raise AssertionError(f"kube-apiserver refused {kind} {where}: {summary}") from exc
            stored.append(answer.to_dict())
        return stored

    # -- clients -----------------------------------------------------------------------------

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` for *kubeconfig* (default: the admin's), closed
        with the control plane."""
        from kubernetes import config

        client = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig or self.admin_kubeconfig)
        )
        self._clients.append(client)
        return client

    def core(self, kubeconfig: Path | None = None) -> Any:
        """``CoreV1Api`` as the admin (or as *kubeconfig*'s user)."""
        from kubernetes import client

        return client.CoreV1Api(self.api_client(kubeconfig))

    def token_kubeconfig(
        self,
        namespace: str,
        service_account: str,
        *,
        pod: tuple[str, str] | None = None,
        server: str | None = None,
    ) -> Path:
        """A kubeconfig that authenticates as *service_account* with a token the API server
        signs (TokenRequest), as a pod of that ServiceAccount would. With *pod* (name, uid)
        the token is bound to that pod, as kubelet mounts it: the API server then adds the
        pod's node to the user's extra (``authentication.kubernetes.io/node-name``). With
        *server* the client reaches the API server at that URL (a proxy in front of it)."""
        from kubernetes import client

        bound = None
        if pod is not None:
            bound = client.V1BoundObjectReference(
                api_version="v1", kind="Pod", name=pod[0], uid=pod[1]
            )
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[self.url], expiration_seconds=3600, bound_object_ref=bound
            )
        )
        answer = self.core().create_namespaced_service_account_token(
            service_account, namespace, request
        )
        suffix = f"-{pod[0]}" if pod is not None else ""
        path = self.work / f"sa-{namespace}-{service_account}{suffix}.kubeconfig"
        assert self.pki is not None
        return write_kubeconfig(
            path,
            server or self.url,
            self.pki.ca_cert,
            token=answer.status.token,
            user=service_account,
        )


def start_xpushare_scheduler(
    plane: ControlPlane,
    config_file: Path,
    *,
    kubeconfig: Path,
    serving: tuple[Path, Path],
    settings: dict[str, str] | None = None,
    name: str = "xpushare-scheduler",
    standby: bool = False,
) -> tuple[Component, str]:
    """Run ``xpushare scheduler`` as a process against *plane* with *config_file* (the chart's
    ``scheduler.yaml``), authenticated by *kubeconfig*, serving TLS with *serving* (cert, key)
    on a free loopback port; returns it and its ``https://127.0.0.1:PORT`` once /readyz
    answers 200 (synced and, with leader election on, leading), or with *standby* once
    /healthz does (a replica that waits for the Lease is never ready)."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "xpushare.cli",
        "scheduler",
        "--config",
        str(config_file),
        "--kubeconfig",
        str(kubeconfig),
        "--port",
        str(port),
        "--metrics-port",
        "0",
        "--tls-cert",
        str(serving[0]),
        "--tls-key",
        str(serving[1]),
        "--set",
        "server.host=127.0.0.1",
    ]
    for key, value in (settings or {}).items():
        args += ["--set", f"{key}={value}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    component = start_process(name, args, plane.logs, env=env)
    plane.components.append(component)
    url = f"https://127.0.0.1:{port}"
    assert plane.pki is not None
    wait_url(component, f"{url}/{'healthz' if standby else 'readyz'}", plane.pki.ca_cert)
    return component, url

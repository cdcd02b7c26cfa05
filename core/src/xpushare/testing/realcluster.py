"""A real Kubernetes control plane on loopback, for tests: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler as processes.

Why: every protocol xpushare speaks (the extender's JSON, AdmissionReview over TLS, watches,
Leases, RBAC, claims) was tested only against doubles we wrote, which tell us what we assumed.
These are the real binaries of the release pinned in ``tools/kube`` (built by
``scripts/kube-binaries``), started the way a cluster runs them: TLS everywhere, client
certificates, service-account tokens signed by the API server, ``Node,RBAC`` authorization and
the admission plugins that call our webhook and evaluate our ValidatingAdmissionPolicy.

No kubelet runs: a bound pod stays Pending on a Node object that :func:`ready_node` made, which
is all the scheduler, the webhook and the ledger look at::

    with ControlPlane(binaries, tmp_dir) as cluster:        # etcd, apiserver, controllers
        cluster.start_scheduler(config)                     # kube-scheduler, our extender in it
        core = cluster.core()                               # kubernetes.client.CoreV1Api
        core.create_node(ready_node("gpu-1", annotations, {"nvidia.com/gpu": "10"}))

Every process is ended (terminate, then kill) when the block ends, whatever happened in it.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import yaml

__all__ = [
    "BINARIES",
    "ControlPlane",
    "HandoffReleaser",
    "Pki",
    "ReadyProxy",
    "binaries_missing",
    "create_ready_node",
    "extender_config",
    "ready_node",
    "start_xpushare_scheduler",
    "wait_url",
    "webhook_config",
]

Object = dict[str, Any]

#: The binaries ``scripts/kube-binaries`` builds, in start order.
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")

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

#: Bounds of waits that end within seconds on a working machine (etcd's first health answer,
#: the API server's readiness after its post-start hooks: ~10 s on a loaded 2-core machine):
#: only there so a broken start fails with the component's log instead of hanging.
START_WAIT_S = 90.0

#: Seconds a component gets to exit after SIGTERM before it is killed.
STOP_WAIT_S = 10.0


def binaries_missing(folder: Path) -> list[str]:
    """The names of :data:`BINARIES` not present (or not executable) in *folder*."""
    return [name for name in BINARIES if not os.access(folder / name, os.X_OK)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- certificates ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """The files of the cluster's trust: written once per control plane by :meth:`create`.

    ``ca`` signs the API server's serving certificate and every client certificate (the API
    server's ``--client-ca-file``); ``sa_key``/``sa_pub`` sign and check service-account tokens.
    """

    directory: Path
    ca_cert: Path
    ca_key: Path
    sa_key: Path
    sa_pub: Path

    @classmethod
    def create(cls, directory: Path) -> Pki:
        from cryptography.hazmat.primitives.asymmetric import rsa

        directory.mkdir(parents=True, exist_ok=True)
        ca_key = _ec_key()
        ca_cert = _certificate("xpushare-test-ca", ca_key, None, ca=True)
        pki = cls(
            directory,
            directory / "ca.crt",
            directory / "ca.key",
            directory / "sa.key",
            directory / "sa.pub",
        )
        pki.ca_cert.write_bytes(_pem_cert(ca_cert))
        pki.ca_key.write_bytes(_pem_key(ca_key))
        # RSA: the algorithm every Kubernetes release verifies service-account tokens with.
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pki.sa_key.write_bytes(_pem_key(sa_key))
        pki.sa_pub.write_bytes(_pem_public(sa_key))
        return pki

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        organizations: tuple[str, ...] = (),
        hosts: tuple[str, ...] = (),
    ) -> tuple[Path, Path]:
        """A certificate signed by the CA (client when no *hosts*, else serving for them):
        its (cert, key) files, ``<name>.crt`` and ``<name>.key``."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        key = _ec_key()
        cert = _certificate(
            common_name,
            key,
            (ca_cert, ca_key),
            organizations=organizations,
            hosts=hosts,
        )
        cert_file = self.directory / f"{name}.crt"
        key_file = self.directory / f"{name}.key"
        cert_file.write_bytes(_pem_cert(cert))
        key_file.write_bytes(_pem_key(key))
        return cert_file, key_file


def _ec_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _certificate(
    common_name: str,
    key: Any,
    issuer: tuple[Any, Any] | None,
    *,
    ca: bool = False,
    organizations: tuple[str, ...] = (),
    hosts: tuple[str, ...] = (),
) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    subject = x509.Name(attributes)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if hosts else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    signer = key if issuer is None else issuer[1]
    return builder.sign(signer, hashes.SHA256())


def _pem_cert(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _pem_public(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


# -- processes -------------------------------------------------------------------------------


@dataclass
class Component:
    """One process of the control plane, its output in ``<name>.log``."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Terminate, then kill: never leaves the process behind."""
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_WAIT_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def start_process(name: str, args: list[str], log_dir: Path, **popen: Any) -> Component:
    """Start *args* with stdout and stderr into ``log_dir/<name>.log``."""
    log_path = log_dir / f"{name}.log"
    log = log_path.open("ab")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, **popen)
    return Component(name, process, log_path, log)


def write_kubeconfig(
    path: Path,
    server: str,
    ca_file: Path,
    *,
    cert: tuple[Path, Path] | None = None,
    token: str | None = None,
    user: str = "user",
) -> Path:
    """A kubeconfig with one cluster, one user (client certificate or bearer token) and one
    context, current."""
    credentials: Object = {}
    if cert is not None:
        credentials = {"client-certificate": str(cert[0]), "client-key": str(cert[1])}
    if token is not None:
        credentials["token"] = token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config))
    return path


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager; kube-scheduler on demand.

    *binaries* is the folder ``scripts/kube-binaries`` printed; *work* an empty folder for the
    certificates, etcd's data, configs and the components' logs. :attr:`started_s` is how long
    the start took (printed, so a slow machine is visible in the test output).
    """

    def __init__(self, binaries: Path, work: Path) -> None:
        missing = binaries_missing(binaries)
        if missing:
            raise FileNotFoundError(
                f"{', '.join(missing)} missing in {binaries}: run scripts/kube-binaries"
            )
        self.binaries = binaries
        self.work = work
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

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

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
        self, config: Object, *, kubeconfig: Path | None = None, name: str = "kube-scheduler"
    ) -> Component:
        """Start kube-scheduler with the KubeSchedulerConfiguration *config*, its
        ``clientConnection.kubeconfig`` set to *kubeconfig* (default: the admin's; with
        ``--config`` kube-scheduler ignores ``--kubeconfig``). Returns when its process is
        running; it is ready once it holds its Lease, which a test sees as pods scheduled."""
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
            "--secure-port=0",
            "--v=2",
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
        self, namespace: str, service_account: str, *, pod: tuple[str, str] | None = None
    ) -> Path:
        """A kubeconfig that authenticates as *service_account* with a token the API server
        signs (TokenRequest), as a pod of that ServiceAccount would. With *pod* (name, uid)
        the token is bound to that pod, as kubelet mounts it: the API server then adds the
        pod's node to the user's extra (``authentication.kubernetes.io/node-name``)."""
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
            path, self.url, self.pki.ca_cert, token=answer.status.token, user=service_account
        )


def wait_url(
    component: Component, url: str, ca_file: Path | None, timeout_s: float = START_WAIT_S
) -> None:
    """Wait until *url* answers 200 (over TLS trusting *ca_file* when given); fails with
    *component*'s log when it exits first or *timeout_s* pass."""
    context = None
    if ca_file is not None:
        context = ssl.create_default_context(cafile=str(ca_file))
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if not component.alive():
            raise RuntimeError(
                f"{component.name} exited with {component.process.returncode} while "
                f"starting; its log ({component.log_path}) ends:\n{component.log_tail()}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.1)
    raise TimeoutError(
        f"{component.name} not ready at {url} within {timeout_s} s ({last}); its log "
        f"({component.log_path}) ends:\n{component.log_tail()}"
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


class ReadyProxy:
    """A TCP proxy to whichever of *backends* answers ``/readyz`` with 200: what a Service with
    a readiness probe gives kube-scheduler and kube-apiserver in front of scheduler replicas
    (only the leader is ready). TLS passes through untouched, so the replicas' serving
    certificate is what the clients verify. As with kube-proxy, a connection stays with the
    backend it was opened to; only new connections follow readiness.
    """

    #: How long a new connection waits for some backend to be ready before it is closed.
    PICK_WAIT_S = 10.0

    def __init__(self, backends: list[str], ca_file: Path) -> None:
        import threading

        self.backends = list(backends)
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="ready-proxy", daemon=True)
        self._thread.start()

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

    def close(self) -> None:
        self._stop.set()
        self._thread.join(STOP_WAIT_S)
        self._server.close()
        with self._lock:
            for sock in self._sockets:
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

        deadline = time.monotonic() + self.PICK_WAIT_S
        url = self.ready_backend()
        while url is None and time.monotonic() < deadline and not self._stop.is_set():
            time.sleep(0.1)
            url = self.ready_backend()
        if url is None:
            client.close()
            return
        port = int(url.rsplit(":", 1)[1])
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        client.settimeout(None)
        with self._lock:
            self._sockets += [client, upstream]
        for source, target in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, target), daemon=True).start()


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


# -- objects ---------------------------------------------------------------------------------


def ready_node(
    name: str,
    annotations: dict[str, str] | None = None,
    capacity: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> Object:
    """A Node object as a healthy kubelet reports it: Ready, with *capacity* (extended
    resources such as ``nvidia.com/gpu`` included) as its allocatable too.

    The status must be written through the status subresource after the create (the API
    server drops ``status`` on create): :func:`create_ready_node` does both.
    """
    resources = {"cpu": "64", "memory": "256Gi", "pods": "250", **(capacity or {})}
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(annotations or {}),
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "a test node without a kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def create_ready_node(core: Any, node: Object) -> Object:
    """Create *node* (from :func:`ready_node`) and write its status; the stored object.

    kube-apiserver's TaintNodesByCondition admission gives every new Node the
    ``node.kubernetes.io/not-ready:NoSchedule`` taint, which the node lifecycle controller
    lifts once the kubelet reports Ready. Neither runs here (see :data:`CONTROLLERS`), so the
    taints are set to the node's own (none unless given), as that controller would leave them.
    """
    name = node["metadata"]["name"]
    core.create_node(node)
    core.patch_node_status(name, {"status": node["status"]})
    taints = (node.get("spec") or {}).get("taints")
    stored: Object = core.patch_node(name, {"spec": {"taints": taints}})
    return stored


def extender_config(
    rendered: Object, url: str, ca_file: Path, *, leader_namespace: str | None = None
) -> Object:
    """The chart's KubeSchedulerConfiguration (*rendered*, parsed) with each extender pointed
    at *url* and trusting *ca_file*; everything else (verbs, managed resources, timeouts,
    ``serverName``, profiles) as the chart renders it."""
    config = dict(rendered)
    extenders = []
    for extender in config.get("extenders") or []:
        tls = {k: v for k, v in (extender.get("tlsConfig") or {}).items() if k != "caData"}
        tls["caFile"] = str(ca_file)
        extenders.append({**extender, "urlPrefix": url, "tlsConfig": tls})
    config["extenders"] = extenders
    if leader_namespace is not None:
        election = dict(config.get("leaderElection") or {})
        election["resourceNamespace"] = leader_namespace
        config["leaderElection"] = election
    return config


def webhook_config(rendered: Object, url: str, ca_pem: bytes) -> Object:
    """The chart's MutatingWebhookConfiguration (*rendered*) with each webhook calling *url*
    (instead of the in-cluster Service) and trusting *ca_pem*; rules, selectors, match
    conditions and failure policy as the chart renders them."""
    import base64

    config = {k: v for k, v in rendered.items() if not k.startswith("__")}
    webhooks = []
    for hook in config.get("webhooks") or []:
        client_config = {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}
        webhooks.append({**hook, "clientConfig": client_config})
    config["webhooks"] = webhooks
    metadata = dict(config.get("metadata") or {})
    # cert-manager's injection annotation would mean nothing here.
    metadata.pop("annotations", None)
    config["metadata"] = metadata
    return config

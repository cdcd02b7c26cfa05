"""Builders shared by the scheduler tests: nodes with inventories, pods, a running scheduler,
a simulated device plugin that releases handoffs, and test TLS certificates."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from xpushare.codec import HANDOFF_KEY, decode_assignment, decode_handoff, encode_inventory
from xpushare.plugins import PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS, mock
from xpushare.scheduler import Scheduler, load_config
from xpushare.scheduler.kube import Kube, KubeSettings
from xpushare.testing.apiserver import FakeApiServer, node, pod

GPU = "xpushare.io/mock-gpu"
MEM = "xpushare.io/mock-gpumem"
PCT = "xpushare.io/mock-gpumem-percentage"
CORES = "xpushare.io/mock-gpucores"
INVENTORY = "xpushare.io/inventory-mock"


def mock_host() -> PluginHost:
    """A plugin host with the core defaults and the mock vendor only."""
    host = PluginHost(core_plugins=CORE_PLUGINS)
    host.register("mock", mock)
    return host


def gpu_node(name: str, spec: str = "8x A100-80GB", **extra: str) -> dict[str, Any]:
    devices = mock.parse_spec(spec, name)
    return node(name, {INVENTORY: encode_inventory("mock", name, devices), **extra})


def add_nodes(api: FakeApiServer, count: int, spec: str = "8x A100-80GB") -> list[str]:
    names = [f"node-{i}" for i in range(count)]
    for name in names:
        api.put("nodes", gpu_node(name, spec))
    return names


def gpu_pod(name: str, namespace: str = "default", **limits: str) -> dict[str, Any]:
    keys = {"gpu": GPU, "mem": MEM, "pct": PCT, "cores": CORES}
    return pod(name, namespace=namespace, limits={keys[k]: v for k, v in limits.items()})


def lease(transitions: int, namespace: str, name: str = "xpushare-scheduler") -> dict[str, Any]:
    """A Lease nobody holds, whose count of terms is at *transitions* (an earlier leader's)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"holderIdentity": "", "leaseTransitions": transitions},
    }


def create_pod(api: FakeApiServer, obj: dict[str, Any]) -> dict[str, Any]:
    return api.put("pods", obj)


def filter_args(pod_obj: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {"Pod": pod_obj, "Nodes": None, "NodeNames": names}


def bind_args(pod_obj: dict[str, Any], node_name: str) -> dict[str, Any]:
    meta = pod_obj["metadata"]
    return {
        "PodName": meta["name"],
        "PodNamespace": meta.get("namespace", "default"),
        "PodUID": meta.get("uid", ""),
        "Node": node_name,
    }


@dataclass
class Running:
    scheduler: Scheduler
    kube: Kube
    url: str
    metrics_url: str | None

    async def close(self) -> None:
        await self.scheduler.stop()
        await self.kube.close()

    async def settle(self, api: FakeApiServer, timeout_s: float = 5.0) -> None:
        """Wait until the scheduler's watches have seen every change the server holds."""

        def seen() -> bool:
            for informer in self.scheduler.informers:
                version = int(informer.version or 0)
                if informer.resource == "handoffs":
                    # The leader's Lease shares the plural: only the handoff Leases count.
                    latest = max(
                        (
                            int(o["metadata"]["resourceVersion"])
                            for o in api.items("leases")
                            if o["metadata"].get("name", "").startswith("handoff")
                        ),
                        default=0,
                    )
                else:
                    latest = api.last_version(informer.resource)
                if version < latest:
                    return False
            return True

        await api.wait_for(seen, timeout_s)

    async def post(self, http: aiohttp.ClientSession, verb: str, body: Any) -> Any:
        async with http.post(f"{self.url}/{verb}", json=body) as response:
            assert response.status == 200, await response.text()
            return await response.json()


async def start_scheduler(
    api: FakeApiServer,
    *,
    leader: bool = False,
    sync: bool = True,
    server: str | None = None,
    **overrides: Any,
) -> Running:
    settings: dict[str, Any] = {
        "server.host": "127.0.0.1",
        "server.port": 0,
        "server.metrics_port": 0,
        "leader.enabled": leader,
        "bind.wait_s": 3.0,
        "bind.repair_interval_s": 0.05,
    }
    settings.update(overrides)
    config = load_config(environ={}, overrides=settings)
    kube = await Kube.connect(
        KubeSettings(server=server or api.url, request_timeout_s=config.kube.request_timeout_s)
    )
    scheduler = Scheduler(config, host=mock_host(), kube=kube, freeze_gc=False)
    await scheduler.start()
    if sync:
        await scheduler.wait_synced(10)
    scheme = "https" if scheduler.tls else "http"
    metrics_port = scheduler.ports.get("metrics")
    return Running(
        scheduler,
        kube,
        f"{scheme}://127.0.0.1:{scheduler.ports['main']}",
        f"http://127.0.0.1:{metrics_port}" if metrics_port else None,
    )


def counts(metric: Any, label: str) -> dict[str, float]:
    """A labelled counter's non-zero totals by *label*'s value."""
    return {
        s.labels[label]: s.value
        for m in metric.collect()
        for s in m.samples
        if s.name.endswith("_total") and s.value
    }


def assignment_of(api: FakeApiServer, name: str, namespace: str = "default") -> Any:
    obj = api.get("pods", name, namespace)
    assert obj is not None
    value = obj["metadata"].get("annotations", {}).get("xpushare.io/assignment")
    return decode_assignment(value) if value else None


class DevicePlugin:
    """Plays kubelet and the node agents: once a node's handoff names a pod bound there, the
    pod is admitted (kubelet's status write of ``status.startTime``), which frees the handoff
    for the next bind (DESIGN.md §6); the agents write nothing.

    It edits the pod through the fake API server, as kubelet would, after *delay_s*.
    """

    def __init__(self, api: FakeApiServer, delay_s: float = 0.0) -> None:
        self.api = api
        self.delay_s = delay_s
        self.served: list[tuple[str, str]] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            for (plural, _namespace, _lease), obj in list(self.api.objects.items()):
                if plural != "leases":
                    continue
                name = (obj.get("spec") or {}).get("holderIdentity") or ""
                raw = obj["metadata"].get("annotations", {}).get(HANDOFF_KEY)
                if raw is None:
                    continue
                handoff = decode_handoff(raw)
                pod = handoff.pod
                target = self.api.get("pods", pod.name, pod.namespace)
                if target is None or target["spec"].get("nodeName") != name:
                    continue
                if (target.get("status") or {}).get("startTime"):
                    continue
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                self.served.append((name, pod.name))

                def admit(o: dict[str, Any]) -> None:
                    o.setdefault("status", {})["startTime"] = "2026-12-06T00:00:00Z"

                if self.api.get("pods", pod.name, pod.namespace) is not None:
                    self.api.modify("pods", pod.name, admit, pod.namespace)
            await asyncio.sleep(0.002)

    def __enter__(self) -> DevicePlugin:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def make_certificates(directory: Path, common_name: str = "xpushare") -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key) files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca_file = directory / "ca.pem"
    cert_file = directory / "tls.crt"
    key_file = directory / "tls.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_file, cert_file, key_file

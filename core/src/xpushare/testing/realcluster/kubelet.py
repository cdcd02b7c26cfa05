"""A real kubelet on a test control plane, with our fake container runtime behind it.

Why: kubelet is the only caller of the node agent's device plugins and DRA plugin, and its
device manager and DRA manager are what a cluster runs; a fake kubelet tells us only what we
assumed. kubelet needs a container runtime to admit a pod: ``fake-runtime``
(tools/kube/fakeruntime, built by ``scripts/kube-binaries``) answers the CRI, runs nothing, and
writes every container config kubelet sends it, which is what a test asserts on::

    with KubeletNode(plane, "gpu-1", labels={...}) as node:   # registers its Node
        ... start the node agent on node.device_plugin_dir / node.plugins_registry_dir ...
        (record,) = node.containers("ml", "train")             # what kubelet asked for
        node.restart()                                         # kubelet only; the runtime stays

Each node has its own folder under /tmp (unix socket paths are limited to 107 bytes, pytest's
are often longer): kubelet's root dir, the runtime's socket and record, and the device-plugin
folder. kubelet's device-plugin folder is a constant (``/var/lib/kubelet/device-plugins``,
``pluginapi.DevicePluginPath``) that does not follow ``--root-dir``; so each kubelet runs in a
mount namespace of its own (``unshare --mount``) where the node's folder is bind-mounted there,
and several kubelets (and several test runs) share one machine. ``/var/log/containers``,
another constant, is bind-mounted the same way. Needs root, as kubelet itself does.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from xpushare.testing.realcluster.processes import (
    START_WAIT_S,
    Component,
    Started,
    free_port,
    start_process,
    wait_url,
    write_kubeconfig,
)

if TYPE_CHECKING:
    from xpushare.testing.realcluster.controlplane import ControlPlane

#: The fake container runtime's binary, built beside kubelet by ``scripts/kube-binaries``.
RUNTIME_BINARY = "fake-runtime"

#: kubelet's fixed device-plugin folder (k8s.io/kubelet pkg/apis/deviceplugin/v1beta1
#: DevicePluginPath) and container-log symlink folder (pkg/kubelet DefaultContainerLogsDir).
KUBELET_DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_CONTAINER_LOGS_DIR = "/var/log/containers"

#: How long kubelet waits between Node status updates: kubelet's default is 10 s; one second
#: lets a test see a newly registered device plugin's resource in the Node's capacity soon.
NODE_STATUS_UPDATE = "1s"

Object = dict[str, Any]


def cgroup_v1() -> bool:
    """Whether this machine mounts cgroup v1 controllers (no unified hierarchy at the root)."""
    return not Path("/sys/fs/cgroup/cgroup.controllers").exists()


def kubelet_config(
    *,
    port: int,
    healthz_port: int,
    runtime_socket: Path,
    root: Path,
    ca_file: Path,
    serving: tuple[Path, Path],
) -> Object:
    """The KubeletConfiguration of a test node: what makes kubelet run where it does not own
    the machine's cgroups (and where the machine may have swap, cgroup v1, a full disk)."""
    config: Object = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(serving[0]),
        "tlsPrivateKeyFile": str(serving[1]),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "imageServiceEndpoint": f"unix://{runtime_socket}",
        # The runtime's RuntimeConfig answer decides from 1.36; said here for older releases.
        "cgroupDriver": "cgroupfs",
        # kubelet would make (and enforce limits on) a cgroup tree of its own for pods.
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        # A test machine's disk or memory may be nearly full: no eviction, no pressure taint.
        "evictionHard": {},
        "localStorageCapacityIsolation": False,
        "podLogsDir": str(root / "pod-logs"),
        "volumePluginDir": str(root / "volume-plugins"),
        "resolvConf": "",
        "registerNode": True,
        "nodeStatusUpdateFrequency": NODE_STATUS_UPDATE,
        "nodeStatusReportFrequency": NODE_STATUS_UPDATE,
        # A pod's status and a deleted pod's teardown follow the runtime's answers this often.
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "serializeImagePulls": False,
    }
    if cgroup_v1():
        # kubelet >= 1.35 refuses cgroup v1 unless told (KEP 5573).
        config["failCgroupV1"] = False
    return config


class KubeletNode(Started):
    """One test node: ``fake-runtime`` and a kubelet registered as ``system:node:NAME``.

    The Node object is kubelet's own (it registers it, with *labels*); the
    ``node.kubernetes.io/not-ready`` taint kube-apiserver gives every new Node is lifted once
    kubelet reports Ready, as the node lifecycle controller (not run here) would.
    """

    def __init__(
        self,
        plane: ControlPlane,
        name: str,
        *,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.plane = plane
        self.name = name
        self.labels = dict(labels or {})
        self.binaries = plane.binaries
        #: The node's folder: short, under /tmp, removed when the node stops.
        self.home = Path(tempfile.mkdtemp(prefix="xkl", dir="/tmp"))
        self.root = self.home / "root"
        #: The folder kubelet sees as /var/lib/kubelet/device-plugins.
        self.device_plugin_dir = self.home / "device-plugins"
        #: kubelet's plugin watcher folder and the conventional home of DRA plugin sockets.
        self.plugins_registry_dir = self.root / "plugins_registry"
        self.dra_plugins_dir = self.root / "plugins"
        self.pod_resources_socket = self.root / "pod-resources" / "kubelet.sock"
        self.runtime_socket = self.home / "cri.sock"
        #: What the runtime was asked: containers/*.json and calls.jsonl.
        self.record = self.home / "record"
        #: The folder kubelet sees as /var/log/containers (its container-log symlinks).
        self.container_logs = self.home / "container-logs"
        self.runtime: Component | None = None
        self.kubelet: Component | None = None
        self.starts = 0
        self._args: list[str] = []
        self._healthz = ""

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the runtime and kubelet; returns once the Node is Ready and untainted."""
        pki = self.plane.pki
        assert pki is not None, "the control plane is not started"
        if os.geteuid() != 0:
            raise PermissionError(
                f"a real kubelet ({self.name}) needs root: kubelet itself, and the bind "
                "mounts of its device-plugin folder in its own mount namespace; run the "
                "real-cluster suite as root"
            )
        self.container_logs.mkdir(parents=True, exist_ok=True)
        for folder in (self.root, self.device_plugin_dir, self.record):
            folder.mkdir(parents=True, exist_ok=True)
        self.runtime = start_process(
            f"fake-runtime-{self.name}",
            [
                str(self.binaries / RUNTIME_BINARY),
                f"--listen={self.runtime_socket}",
                f"--record={self.record}",
            ],
            self.plane.logs,
        )
        self._wait_socket(self.runtime, self.runtime_socket)

        client = pki.issue(
            f"kubelet-{self.name}",
            common_name=f"system:node:{self.name}",
            organizations=("system:nodes",),
        )
        kubeconfig = write_kubeconfig(
            self.home / "kubelet.kubeconfig",
            self.plane.url,
            pki.ca_cert,
            cert=client,
            user=f"system:node:{self.name}",
        )
        serving = pki.issue(
            f"kubelet-serving-{self.name}",
            common_name=self.name,
            hosts=("127.0.0.1", self.name),
        )
        healthz_port = free_port()
        config = kubelet_config(
            port=free_port(),
            healthz_port=healthz_port,
            runtime_socket=self.runtime_socket,
            root=self.root,
            ca_file=pki.ca_cert,
            serving=serving,
        )
        config_path = self.home / "kubelet.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._healthz = f"http://127.0.0.1:{healthz_port}/healthz"
        kubelet = [
            str(self.binaries / "kubelet"),
            f"--config={config_path}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.root}",
            f"--cert-dir={self.root / 'pki'}",
            f"--hostname-override={self.name}",
            "--v=2",
        ]
        if self.labels:
            labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
            kubelet.append(f"--node-labels={labels}")
        # The private mount namespace: the node's folders where kubelet's constants point.
        # `unshare` execs the shell and the shell execs kubelet: one process, whose pid is ours.
        script = (
            'mkdir -p "$3" "$4" && mount --bind "$1" "$3" && mount --bind "$2" "$4" '
            '&& shift 4 && exec "$@"'
        )
        self._args = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "kubelet-namespace",
            str(self.device_plugin_dir),
            str(self.container_logs),
            KUBELET_DEVICE_PLUGIN_DIR,
            KUBELET_CONTAINER_LOGS_DIR,
            *kubelet,
        ]
        self._start_kubelet()
        self._wait_ready()

    def _start_kubelet(self) -> None:
        self.starts += 1
        self.kubelet = start_process(f"kubelet-{self.name}", self._args, self.plane.logs)
        self.plane.components.append(self.kubelet)
        wait_url(self.kubelet, self._healthz, None)

    def stop_kubelet(self) -> None:
        """Stop kubelet (SIGTERM, then SIGKILL), leaving the runtime and its containers."""
        if self.kubelet is not None:
            self.kubelet.stop()
            with contextlib.suppress(ValueError):
                self.plane.components.remove(self.kubelet)
            self.kubelet = None

    def restart(self) -> None:
        """Stop kubelet and start it again with the same flags, as an upgrade or a crash of
        kubelet does; the runtime and what it runs stay. Returns once /healthz answers."""
        self.stop_kubelet()
        self._start_kubelet()

    def stop(self) -> None:
        """Stop kubelet and the runtime, remove the Node (as a node taken out of a cluster
        is: the control plane lives on, and later tests must not see its devices) and the
        node's folder."""
        self.stop_kubelet()
        if self.runtime is not None:
            self.runtime.stop()
            self.runtime = None
        if self.plane.url:
            with contextlib.suppress(Exception):
                self._forget()
        shutil.rmtree(self.home, ignore_errors=True)

    def _forget(self) -> None:
        """Remove the Node and the pods still bound to it, as the pod garbage collector (not
        run here) removes the pods of a Node that is gone."""
        core = self.plane.core()
        left = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.name}")
        for pod in left.items:
            core.delete_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
            )
        core.delete_node(self.name)

    def _wait_socket(self, component: Component, path: Path) -> None:
        deadline = time.monotonic() + START_WAIT_S
        while not path.exists():
            if not component.alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{component.name} did not serve {path}; its log "
                    f"({component.log_path}) ends:\n{component.log_tail()}"
                )
            time.sleep(0.05)

    def _wait_ready(self) -> None:
        """Wait for kubelet's Node to be Ready, then lift the not-ready taint."""
        core = self.plane.core()
        deadline = time.monotonic() + START_WAIT_S
        while True:
            node = self.node(core)
            if node is not None and _ready(node):
                break
            if self.kubelet is None or not self.kubelet.alive() or time.monotonic() > deadline:
                tail = self.kubelet.log_tail(60) if self.kubelet else ""
                raise RuntimeError(f"kubelet of {self.name} did not make its Node Ready:\n{tail}")
            time.sleep(0.2)
        taints = [
            t
            for t in (node.get("spec") or {}).get("taints") or []
            if not t["key"].startswith("node.kubernetes.io/not-ready")
        ]
        core.patch_node(self.name, {"spec": {"taints": taints or None}})

    # -- what a test reads -------------------------------------------------------------------

    def node(self, core: Any = None) -> Object | None:
        """kubelet's Node object, or ``None`` before it registered."""
        from kubernetes.client.exceptions import ApiException

        core = core or self.plane.core()
        try:
            found = core.read_node(self.name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        node: Object = core.api_client.sanitize_for_serialization(found)
        return node

    def capacity(self) -> dict[str, str]:
        node = self.node()
        return dict(((node or {}).get("status") or {}).get("capacity") or {})

    def containers(self, namespace: str | None = None, pod: str | None = None) -> list[Object]:
        """The container configs kubelet sent the runtime (oldest first), each as
        ``{"container_id": ..., "request": CreateContainerRequest}`` in protojson with the
        proto's field names (``config.envs``, ``config.mounts``, ``config.devices``,
        ``config.CDI_devices``, ``config.annotations``, ``sandbox_config.metadata``)."""
        found = []
        for path in sorted((self.record / "containers").glob("*.json")):
            record: Object = json.loads(path.read_text())
            meta = record["request"]["sandbox_config"]["metadata"]
            if namespace is not None and meta.get("namespace") != namespace:
                continue
            if pod is not None and meta.get("name") != pod:
                continue
            found.append(record)
        return found

    def pod_devices(self, namespace: str, pod: str) -> dict[str, set[str]]:
        """What kubelet's PodResources API says *pod*'s containers hold: device ids per
        resource name (device plugins; our copy of the proto leaves out DRA's fields)."""
        import grpc

        from xpushare.node.podresources import pr, pr_grpc

        with grpc.insecure_channel(f"unix://{self.pod_resources_socket}") as channel:
            answer = pr_grpc.PodResourcesListerStub(channel).List(
                pr.ListPodResourcesRequest(), timeout=10
            )
        held: dict[str, set[str]] = {}
        for found in answer.pod_resources:
            if (found.namespace, found.name) != (namespace, pod):
                continue
            for container in found.containers:
                for devices in container.devices:
                    held.setdefault(devices.resource_name, set()).update(devices.device_ids)
        return held

    def calls(self) -> list[Object]:
        """The runtime's call log: ``{"call": "RunPodSandbox", "pod": "ns/name", ...}``."""
        path = self.record / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _ready(node: Object) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def config_env(record: Object) -> dict[str, str]:
    """A container record's environment as a dict. The CRI's ``KeyValue.value`` is ``bytes``
    since 1.36 (an environment need not be UTF-8), which protojson writes in base64."""
    import base64

    config = record["request"]["config"]
    return {
        e["key"]: base64.b64decode(e.get("value", "")).decode(errors="replace")
        for e in config.get("envs") or []
    }

"""The node agent's settings: where kubelet is, how often to look, how long to wait.

Why one frozen object: every part of the agent (device plugins, Allocate, loops, probes)
reads the same values, tests shrink the intervals to milliseconds by passing another
object, and the CLI builds it from flags and ``XPUSHARE_NODE_*`` variables in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from xpushare.codec.keys import DEFAULT_HANDOFF_NAMESPACE

#: kubelet's device-plugin directory; a fixed constant that does not follow kubelet's
#: ``--root-dir`` (research/k8s-apis.md §0, pluginapi.DevicePluginPath).
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")

#: File name of kubelet's registration socket in that directory (k8s-apis.md §0).
KUBELET_SOCKET = "kubelet.sock"

#: kubelet's plugin-registration directory (its plugin watcher) and the conventional home of
#: plugin sockets, both under kubelet's root directory (research/k8s-apis.md §6.3).
PLUGINS_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
DRA_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")

#: Where containerd and CRI-O read CDI specs written at run time (the CDI specification's
#: dynamic directory).
CDI_DIR = Path("/var/run/cdi")

#: How the agent serves kubelet: the device-plugin API, or Dynamic Resource Allocation.
MODES = ("device-plugin", "dra")

#: Metrics and probes port. Next to HAMi's ports (9394 vGPU monitor, 9395 scheduler,
#: research/hami-protocol.md §3.13 and §7.4), so a cluster's firewall rules for GPU sharing
#: stay one range; dcgm-exporter's 9400 is left alone.
METRICS_PORT = 9396


#: What a namespace's name must be (a DNS label; Kubernetes validates it the same way).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

#: The settings that are paths (made absolute, see ``NodeConfig.__post_init__``).
_PATH_SETTINGS = (
    "device_plugin_dir",
    "partition_lock_path",
    "state_dir",
    "pod_resources_socket",
    "plugins_registry_dir",
    "dra_plugins_dir",
    "cdi_dir",
)


@dataclass(frozen=True)
class NodeConfig:
    """Settings of one node agent process."""

    #: The Kubernetes node this agent serves (the DaemonSet passes ``spec.nodeName``).
    node_name: str
    #: kubelet's device-plugin directory (a temporary directory in tests).
    device_plugin_dir: Path = DEVICE_PLUGIN_DIR
    #: Address and port of ``/metrics``, ``/healthz`` and ``/readyz``; port 0 picks a free one.
    metrics_host: str = "0.0.0.0"
    metrics_port: int = METRICS_PORT
    #: Seconds between re-detections. Re-detection also runs at once on SIGHUP, when health
    #: or monitor reports a device id the inventory lacks (a partition layout changed), and
    #: when the partition lock file disappears. One minute keeps a new GPU or a MIG change
    #: visible to the scheduler within a minute at a negligible cost (detect is an
    #: enumeration of a few devices, research/perf-reliability.md §2.1).
    detect_interval_s: float = 60.0
    #: Seconds between monitor samples: GPUStack's ``--monitor-period`` default
    #: (research/gpustack-devices.md §2.4). A sample older than three periods is not served.
    monitor_interval_s: float = 15.0
    #: Seconds between health checks. Vendor event queues (NVML's event set) keep events
    #: between checks, so nothing is lost; a failing device is seen within about a second.
    health_interval_s: float = 1.0
    #: How long one health check may block waiting for events. Short on purpose: the check
    #: runs on the vendor's library thread, where an Allocate queued behind it waits too
    #: (HAMi waits 5 s on a thread of its own, research/hami-protocol.md §6.5; we cannot).
    health_wait_s: float = 0.1
    #: Seconds between checks that the node still carries our annotations and labels (they
    #: are restored when someone deletes them). Two minutes keeps 5,000 nodes at about 40
    #: GETs a second in all, and a deleted label is back within minutes.
    reconcile_interval_s: float = 120.0
    #: How often each device plugin checks that its socket and kubelet's are still the ones
    #: it registered with. Half a second keeps re-registration under the 2 s target
    #: (DESIGN.md §9) after kubelet re-creates kubelet.sock; a stat() call costs microseconds.
    socket_poll_s: float = 0.5
    #: Wait between registration attempts while kubelet.sock is missing or refuses.
    register_retry_s: float = 0.25
    #: Bound of one Register call: kubelet dials the plugin back with a 10 s timeout from
    #: inside Register (research/k8s-apis.md §0); GPUStack bounds it at 15 s (§4.2).
    register_timeout_s: float = 15.0
    #: Allocate's own deadline. kubelet calls Allocate with no timeout inside its pod
    #: admission loop, so a hung Allocate would stall every new pod on the node
    #: (research/perf-reliability.md §2.3). Eight seconds covers two API round trips under
    #: load (3 s each, below) plus a vendor allocate, and is an error, never a block.
    allocate_deadline_s: float = 8.0
    #: Bound of one Kubernetes API request made by the agent.
    api_timeout_s: float = 3.0
    #: When this file disappears, a partition (MIG) change has been applied: re-detect. HAMi's
    #: MIG tooling creates it while it changes the geometry (research/hami-protocol.md §6.6).
    partition_lock_path: Path | None = Path("/tmp/hami/hami-mig-apply.lock")
    #: Where the release ledger keeps the pods allocated here until they are released
    #: (node/ledger.py). ``None``: ``<device_plugin_dir>/xpushare-state``, which survives
    #: agent and kubelet restarts (kubelet deletes only sockets there) with no extra mount.
    state_dir: Path | None = None
    #: kubelet's PodResources socket, asked which pods are still active before a pod is
    #: released (research/k8s-apis.md §2.1); ``None`` or a missing socket: the API server's
    #: word alone decides.
    pod_resources_socket: Path | None = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    #: How often PodResources is asked (and the pod list re-read where the client cannot
    #: watch): two seconds frees an instance soon after its pod ends, at 0.5 calls a second
    #: against kubelet's limit of 100 (research/k8s-apis.md §2.1).
    release_poll_s: float = 2.0
    #: ``device-plugin``: extended resources through kubelet's device-plugin API (the
    #: scheduler extender places pods). ``dra``: ResourceSlices and a kubelet DRA plugin per
    #: vendor (kube-scheduler allocates claims; docs/dra.md). One mode per node.
    mode: str = "device-plugin"
    #: DRA mode: kubelet's plugin watcher directory, the plugins' socket directory, and the
    #: container runtime's CDI directory the claims' specs are written to.
    plugins_registry_dir: Path = PLUGINS_REGISTRY_DIR
    dra_plugins_dir: Path = DRA_PLUGINS_DIR
    cdi_dir: Path = CDI_DIR
    #: Export HAMi's vGPU monitor metrics too (hami_vgpu_memory_used_bytes, ...), so HAMi's
    #: Grafana dashboard works unchanged (docs/migrate-from-hami.md).
    hami_metrics: bool = False
    #: The namespace of the nodes' handoff Leases (``handoff.<node>``): the scheduler's
    #: ``bind.handoff_namespace``, where it says which pod this node serves next.
    handoff_namespace: str = DEFAULT_HANDOFF_NAMESPACE

    @property
    def ledger_dir(self) -> Path:
        return self.state_dir or self.device_plugin_dir / "xpushare-state"

    @property
    def kubelet_socket(self) -> Path:
        return self.device_plugin_dir / KUBELET_SOCKET

    def __post_init__(self) -> None:
        if not self.node_name:
            raise ValueError(
                "the node agent needs its node name: set NODE_NAME from the pod's "
                "spec.nodeName (downward API) or pass --node-name"
            )
        if not _DNS_LABEL.match(self.handoff_namespace) or len(self.handoff_namespace) > 63:
            raise ValueError(
                f"handoff namespace {self.handoff_namespace[:80]!r} is not a namespace name "
                "(a DNS label: lowercase letters, digits and '-', at most 63 characters)"
            )
        if self.mode not in MODES:
            raise ValueError(
                f"node agent mode must be one of {', '.join(MODES)}, got {self.mode!r}"
            )
        for name in (
            "detect_interval_s",
            "monitor_interval_s",
            "health_interval_s",
            "health_wait_s",
            "reconcile_interval_s",
            "socket_poll_s",
            "register_retry_s",
            "register_timeout_s",
            "allocate_deadline_s",
            "api_timeout_s",
            "release_poll_s",
        ):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"node agent setting {name} must be positive, got {value!r}")
        # A relative directory is relative to the agent's working directory, but kubelet is
        # told socket paths it dials from its own, and gRPC reads "unix://plug/x.sock" as the
        # host "plug" and refuses to bind: every path is made absolute here, once.
        for name in _PATH_SETTINGS:
            path = getattr(self, name)
            if path is not None and not path.is_absolute():
                object.__setattr__(self, name, path.absolute())

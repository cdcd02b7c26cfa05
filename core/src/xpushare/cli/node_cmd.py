"""``xpushare node``: run the node agent (the DaemonSet's command).

Flags fall back to environment variables (``XPUSHARE_NODE_*``, and ``NODE_NAME`` as the
downward API sets it), so the DaemonSet can configure the agent either way. Heavy imports
(gRPC, the Kubernetes client) happen inside the command, keeping ``xpushare --help`` fast.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from xpushare.codec.keys import DEFAULT_HANDOFF_NAMESPACE
from xpushare.errors import XpushareError

if TYPE_CHECKING:
    from xpushare.node import NodeAgent, NodeConfig

log = logging.getLogger(__name__)


def _vendor_config(path: Path | None) -> dict[str, dict[str, Any]]:
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc}", param_hint="--vendor-config"
        ) from exc
    vendors = data.get("vendors", data) if isinstance(data, dict) else None
    if not isinstance(vendors, dict) or not all(isinstance(v, dict) for v in vendors.values()):
        raise click.BadParameter(
            f"{path} must map vendor names to their settings, e.g. "
            "'mock: {devices: 8x A100-80GB}'",
            param_hint="--vendor-config",
        )
    return vendors


async def _serve(agent: NodeAgent) -> None:
    loop = asyncio.get_running_loop()
    stopping: set[asyncio.Task[None]] = set()

    def stop() -> None:
        log.info("stopping the node agent")
        task = loop.create_task(agent.stop())
        stopping.add(task)
        task.add_done_callback(stopping.discard)

    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)
    loop.add_signal_handler(signal.SIGHUP, agent.rescan)
    await agent.run()


def _run(
    config: NodeConfig,
    kubeconfig: str | None,
    vendor_config: dict[str, Any],
    api_server: str | None = None,
) -> None:
    from xpushare.node import KubeClient, NodeAgent, TaskFailed
    from xpushare.plugins import PluginHost

    host = PluginHost.from_environment(node_name=config.node_name, vendor_config=vendor_config)
    if api_server:
        kube = KubeClient.for_host(
            config.node_name,
            api_server,
            timeout_s=config.api_timeout_s,
            handoff_namespace=config.handoff_namespace,
        )
    else:
        kube = KubeClient.from_environment(
            config.node_name,
            kubeconfig=kubeconfig,
            timeout_s=config.api_timeout_s,
            handoff_namespace=config.handoff_namespace,
        )
    agent = NodeAgent(config, host, kube)
    try:
        asyncio.run(_serve(agent))
    except TaskFailed as exc:
        raise click.ClickException(f"node agent stopped: {exc}") from exc
    finally:
        kube.close()


@click.command("node")
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    required=True,
    help="This node's name, as Kubernetes knows it (env NODE_NAME: set it from spec.nodeName).",
)
@click.option(
    "--device-plugin-dir",
    envvar="XPUSHARE_NODE_DEVICE_PLUGIN_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    default="/var/lib/kubelet/device-plugins",
    show_default=True,
    help="kubelet's device-plugin directory (mount it from the host).",
)
@click.option(
    "--metrics-host", envvar="XPUSHARE_NODE_METRICS_HOST", default="0.0.0.0", show_default=True
)
@click.option(
    "--metrics-port",
    envvar="XPUSHARE_NODE_METRICS_PORT",
    type=int,
    default=9396,
    show_default=True,
    help="Port of /metrics, /healthz and /readyz.",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig file; in a pod the service account is used instead.",
)
@click.option(
    "--api-server",
    envvar="XPUSHARE_NODE_API_SERVER",
    default=None,
    help="Talk to this API server URL without credentials (e.g. kubectl proxy's) instead of "
    "the service account or a kubeconfig.",
)
@click.option(
    "--handoff-namespace",
    envvar="XPUSHARE_HANDOFF_NAMESPACE",
    default=DEFAULT_HANDOFF_NAMESPACE,
    show_default=True,
    help="Namespace of the nodes' handoff Leases, where the scheduler says which pod this "
    "node serves next: the scheduler's bind.handoff_namespace (the chart sets both to the "
    "release's namespace).",
)
@click.option(
    "--state-dir",
    envvar="XPUSHARE_NODE_STATE_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where pods allocated here are remembered until released "
    "[default: <device-plugin-dir>/xpushare-state].",
)
@click.option(
    "--pod-resources-socket",
    envvar="XPUSHARE_NODE_POD_RESOURCES_SOCKET",
    default="/var/lib/kubelet/pod-resources/kubelet.sock",
    show_default=True,
    help="kubelet's PodResources socket, asked before a pod is released; empty to disable.",
)
@click.option(
    "--vendor-config",
    envvar="XPUSHARE_NODE_VENDOR_CONFIG",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="YAML file of per-vendor settings ({vendor: {key: value}}), e.g. library paths.",
)
@click.option(
    "--detect-interval",
    envvar="XPUSHARE_NODE_DETECT_INTERVAL",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds between re-detections (SIGHUP re-detects at once).",
)
@click.option(
    "--monitor-interval",
    envvar="XPUSHARE_NODE_MONITOR_INTERVAL",
    type=float,
    default=15.0,
    show_default=True,
    help="Seconds between usage samples served on /metrics.",
)
@click.option(
    "--reconcile-interval",
    envvar="XPUSHARE_NODE_RECONCILE_INTERVAL",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds between checks that the node's annotations and labels are intact.",
)
@click.option(
    "--allocate-deadline",
    envvar="XPUSHARE_NODE_ALLOCATE_DEADLINE",
    type=float,
    default=8.0,
    show_default=True,
    help="Allocate answers (with an error if need be) within this many seconds.",
)
@click.option(
    "--partition-lock",
    envvar="XPUSHARE_NODE_PARTITION_LOCK",
    default="/tmp/hami/hami-mig-apply.lock",
    show_default=True,
    help="Re-detect when this file disappears (MIG changes); empty to disable.",
)
@click.option(
    "--mode",
    envvar="XPUSHARE_NODE_MODE",
    type=click.Choice(["device-plugin", "dra"]),
    default="device-plugin",
    show_default=True,
    help="Serve kubelet's device-plugin API, or Dynamic Resource Allocation (ResourceSlices "
    "and a kubelet DRA plugin per vendor; docs/dra.md).",
)
@click.option(
    "--plugins-registry-dir",
    envvar="XPUSHARE_NODE_PLUGINS_REGISTRY_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    default="/var/lib/kubelet/plugins_registry",
    show_default=True,
    help="DRA mode: kubelet's plugin watcher directory (mount it from the host).",
)
@click.option(
    "--dra-plugins-dir",
    envvar="XPUSHARE_NODE_DRA_PLUGINS_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    default="/var/lib/kubelet/plugins",
    show_default=True,
    help="DRA mode: where each driver's DRA socket is served (mount it from the host).",
)
@click.option(
    "--cdi-dir",
    envvar="XPUSHARE_NODE_CDI_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    default="/var/run/cdi",
    show_default=True,
    help="DRA mode: the container runtime's CDI directory, where claims' specs are written.",
)
@click.option(
    "--hami-metrics/--no-hami-metrics",
    envvar="XPUSHARE_NODE_HAMI_METRICS",
    default=False,
    show_default=True,
    help="Also export HAMi's vGPU monitor metrics (hami_vgpu_memory_used_bytes, ...) for "
    "HAMi's Grafana dashboard.",
)
def command(
    node_name: str,
    device_plugin_dir: Path,
    metrics_host: str,
    metrics_port: int,
    kubeconfig: str | None,
    api_server: str | None,
    handoff_namespace: str,
    state_dir: Path | None,
    pod_resources_socket: str,
    vendor_config: Path | None,
    detect_interval: float,
    monitor_interval: float,
    reconcile_interval: float,
    allocate_deadline: float,
    partition_lock: str,
    mode: str,
    plugins_registry_dir: Path,
    dra_plugins_dir: Path,
    cdi_dir: Path,
    hami_metrics: bool,
) -> None:
    """Run the node agent: one per node, as a DaemonSet.

    \b
    It detects every loaded vendor's devices and publishes them on the Node
    (annotations xpushare.io/inventory-<vendor>, labels xpushare.io/<vendor>.*),
    serves one kubelet device plugin per vendor resource and answers Allocate from
    the pod's assignment (or, with --mode dra, publishes ResourceSlices and
    prepares claims through a kubelet DRA plugin per vendor), marks devices
    unhealthy on vendor health events, and
    serves /metrics, /healthz and /readyz. SIGHUP re-detects; SIGTERM stops.
    A part that fails stops the process, so Kubernetes restarts it.

    See docs/node-agent.md.
    """
    from xpushare.node import NodeConfig

    try:
        config = NodeConfig(
            node_name=node_name,
            device_plugin_dir=device_plugin_dir,
            metrics_host=metrics_host,
            metrics_port=metrics_port,
            detect_interval_s=detect_interval,
            monitor_interval_s=monitor_interval,
            reconcile_interval_s=reconcile_interval,
            allocate_deadline_s=allocate_deadline,
            partition_lock_path=Path(partition_lock) if partition_lock else None,
            state_dir=state_dir,
            pod_resources_socket=Path(pod_resources_socket) if pod_resources_socket else None,
            mode=mode,
            plugins_registry_dir=plugins_registry_dir,
            dra_plugins_dir=dra_plugins_dir,
            cdi_dir=cdi_dir,
            hami_metrics=hami_metrics,
            handoff_namespace=handoff_namespace,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        _run(config, kubeconfig, _vendor_config(vendor_config), api_server)
    except XpushareError as exc:
        raise click.ClickException(str(exc)) from exc

"""Run the real node agent in a test, served to a fake kubelet, with intervals in milliseconds.

Why: every test of the node side (the core's, each vendor plugin's, the pod-flow harness)
needs the same few steps: a short directory for the device-plugin sockets, a
:class:`~xpushare.node.NodeConfig` whose loops tick fast enough that a test waits on events
rather than on clocks, the agent started next to a :class:`~xpushare.testing.kubelet.FakeKubelet`,
a wait until kubelet has the vendor's resource registered and listed, and a teardown that
stops the agent before the kubelet and shuts the vendor libraries down. Written once here,
so a fix to the start or stop order reaches every test. Example::

    from xpushare.testing.kube import InMemoryKube
    from xpushare.testing.nodeagent import run_node_agent, short_socket_dir

    with short_socket_dir() as plugin_dir:
        async with run_node_agent(host, InMemoryKube("node-a"), plugin_dir,
                                  wait_for="acme.com/gpu") as running:
            result = await running.kubelet.admit_pod(uid, [ContainerSpec("main", {...})])
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xpushare.node import NodeAgent, NodeConfig
from xpushare.node.tasks import TaskFailed
from xpushare.testing.kubelet import FakeKubelet

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from xpushare.node.kube import NodeKube
    from xpushare.plugins import PluginHost

__all__ = ["RunningAgent", "fast_node_config", "run_node_agent", "short_socket_dir"]

#: How long the fake kubelet waits to dial a plugin back. The agent's socket is up before it
#: registers, so the dial is immediate; kubelet's own 10 s (research/k8s-apis.md §0) would
#: only make a broken test hang longer.
DIAL_TIMEOUT_S = 2.0

#: How long to wait for the agent's plugin to register and list its devices: registration is
#: immediate on a working agent, so this too only stops a broken test from hanging.
REGISTER_WAIT_S = 10.0


@contextlib.contextmanager
def short_socket_dir(prefix: str = "xpt") -> Iterator[Path]:
    """A fresh directory under ``/tmp`` for kubelet's and the plugins' unix sockets.

    Not pytest's ``tmp_path``: a unix socket path has at most 107 bytes, and pytest's
    directories (test name included) are often longer.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def fast_node_config(node_name: str, plugin_dir: Path, **overrides: Any) -> NodeConfig:
    """A node agent config for tests: loopback metrics on a free port, loops in milliseconds.

    Monitor and health run every 20 ms and registration retries every 10 ms, so a test sees a
    change as soon as the agent makes it; detection and reconciliation run only when asked
    (30 s), so they never race a test's own steps. *overrides* are ``NodeConfig`` fields.
    """
    base = NodeConfig(
        node_name=node_name,
        device_plugin_dir=plugin_dir,
        metrics_host="127.0.0.1",
        metrics_port=0,
        detect_interval_s=30.0,
        monitor_interval_s=0.02,
        health_interval_s=0.02,
        health_wait_s=0.01,
        reconcile_interval_s=30.0,
        socket_poll_s=0.01,
        register_retry_s=0.01,
        register_timeout_s=2.0,
        allocate_deadline_s=2.0,
        partition_lock_path=None,
        pod_resources_socket=None,
        release_poll_s=0.02,
    )
    return replace(base, **overrides)


@dataclass
class RunningAgent:
    """A node agent running on the loop, and the fake kubelet it serves."""

    agent: NodeAgent
    kubelet: FakeKubelet
    #: The kube the agent was given, as its own type (tests call its helpers, e.g. ``bind``).
    kube: Any
    task: asyncio.Task[None]

    async def stop(self) -> None:
        """Stop the agent and wait for its task (a task that failed on the way out is fine)."""
        await self.agent.stop()
        with contextlib.suppress(TaskFailed):
            await self.task


@contextlib.asynccontextmanager
async def run_node_agent(
    host: PluginHost,
    kube: NodeKube,
    plugin_dir: Path,
    *,
    kubelet: FakeKubelet | None = None,
    wait_for: str | None = None,
    **config: Any,
) -> AsyncIterator[RunningAgent]:
    """Start the node agent on *host* and *kube*, served to a fake kubelet in *plugin_dir*.

    The kubelet is started here (and stopped on exit) unless one is given. With *wait_for*
    (a resource name), entering waits until kubelet has that resource registered and has
    received its first device list. On exit the agent stops, then the kubelet, then *host*
    is closed (every vendor library shut down). The agent serves *kube*'s node; *config*
    overrides :func:`fast_node_config` fields.
    """
    own_kubelet = kubelet is None
    served = (
        kubelet if kubelet is not None else FakeKubelet(plugin_dir, dial_timeout_s=DIAL_TIMEOUT_S)
    )
    if own_kubelet:
        await served.start()
    agent = NodeAgent(fast_node_config(kube.node_name, plugin_dir, **config), host, kube)
    running = RunningAgent(agent, served, kube, asyncio.create_task(agent.run()))
    try:
        if wait_for is not None:
            await served.wait_until(
                lambda: served.registered(wait_for) and served.updates(wait_for) > 0,
                timeout_s=REGISTER_WAIT_S,
                what=f"{wait_for} registered and listed",
            )
        yield running
    finally:
        await running.stop()
        if own_kubelet:
            await served.stop()
        host.close()

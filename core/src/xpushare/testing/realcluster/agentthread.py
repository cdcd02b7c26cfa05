"""The real node agent on an event loop of its own, in a thread of the test process.

Why a thread: a real kubelet's tests are plain (synchronous) tests sharing module fixtures,
while the agent is asyncio; and the agent must live in the test's process when the vendor is a
fake C library whose device table the test shapes through ctypes (the NVIDIA plugin's fake
NVML), since the table is per process. The agent is :class:`~xpushare.node.NodeAgent`, built
as ``xpushare node`` builds it, with the paths of a :class:`KubeletNode`::

    with AgentThread(config_for(node, mode="device-plugin"), host, kube) as agent:
        agent.wait(lambda a: a.plugins["nvidia"].registered, "registered")
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xpushare.testing.realcluster.processes import START_WAIT_S, STOP_WAIT_S, Started

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.node import NodeAgent, NodeConfig
    from xpushare.node.kube import NodeKube
    from xpushare.plugins import PluginHost
    from xpushare.testing.realcluster.kubelet import KubeletNode


def config_for(node: KubeletNode, **overrides: Any) -> NodeConfig:
    """A node agent config that serves *node*'s kubelet: its device-plugin folder, plugin
    watcher, DRA socket folder and PodResources socket, a CDI folder of the node's own, and
    loops quick enough for a test. Detection and the periodic reconciliation run every ten
    minutes: whatever a test sees happen comes from a watch or an event, not a timer."""
    # The node agent (gRPC, the Kubernetes client) is imported only by the tests that run
    # one: a control plane alone does not need it.
    from xpushare.node import NodeConfig

    base = NodeConfig(
        node_name=node.name,
        device_plugin_dir=node.device_plugin_dir,
        metrics_host="127.0.0.1",
        metrics_port=0,
        detect_interval_s=600.0,
        reconcile_interval_s=600.0,
        monitor_interval_s=1.0,
        socket_poll_s=0.1,
        register_retry_s=0.1,
        release_poll_s=0.5,
        partition_lock_path=None,
        pod_resources_socket=node.pod_resources_socket,
        plugins_registry_dir=node.plugins_registry_dir,
        dra_plugins_dir=node.dra_plugins_dir,
        cdi_dir=Path(node.home) / "cdi",
    )
    return replace(base, **overrides)


class AgentThread(Started):
    """Run :class:`NodeAgent` (*config*, *host*, *kube*) until :meth:`stop`; *host* and *kube*
    are closed on stop. A part of the agent that fails is kept in :attr:`error`."""

    #: A start that timed out is raised without stop(): the host and client the caller
    #: made stay open for it to read (a fake library's table) and close.
    stop_after_failed_start = False

    def __init__(self, config: NodeConfig, host: PluginHost, kube: NodeKube) -> None:
        self.config = config
        self.host = host
        self.kube = kube
        self.agent: NodeAgent | None = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._made = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name=f"node-agent-{config.node_name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        if not self._made.wait(START_WAIT_S):
            raise TimeoutError(f"the node agent of {self.config.node_name} did not start")

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        from xpushare.node import NodeAgent

        self._loop = asyncio.get_running_loop()
        self.agent = NodeAgent(self.config, self.host, self.kube)
        self._made.set()
        try:
            await self.agent.run()
        except BaseException as exc:  # kept for the test to report
            self.error = exc

    def stop(self) -> None:
        """Stop the agent, wait for its thread, shut the vendor libraries down."""
        from xpushare.node.tasks import TaskFailed

        agent, loop = self.agent, self._loop
        if agent is not None and loop is not None and self._thread.is_alive():
            future = asyncio.run_coroutine_threadsafe(agent.stop(), loop)
            with contextlib.suppress(TaskFailed, TimeoutError, RuntimeError):
                future.result(STOP_WAIT_S)
        self._thread.join(STOP_WAIT_S)
        self.host.close()
        close = getattr(self.kube, "close", None)
        if close is not None:
            close()

    def wait(
        self, check: Callable[[NodeAgent], bool], what: str, timeout_s: float = START_WAIT_S
    ) -> None:
        """Wait until ``check(agent)`` holds; fails naming *what* (and the agent's error, if a
        part of it stopped) after *timeout_s*. *check* reads the agent from this thread: only
        plain attributes (a flag, a counter), never a call into its loop."""
        deadline = time.monotonic() + timeout_s
        while True:
            agent = self.agent
            if agent is not None and check(agent):
                return
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"node agent of {self.config.node_name} stopped: {self.error}")
            if time.monotonic() > deadline:
                reasons = agent.readiness() if agent is not None else ["not made"]
                raise TimeoutError(f"node agent: {what}: not within {timeout_s} s ({reasons})")
            time.sleep(0.05)

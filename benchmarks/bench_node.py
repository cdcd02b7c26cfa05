"""Node agent benchmark: Allocate latency, re-registration time, memory under scrapes.

Why a script and not a test: these are timings and memory figures, which depend on the
machine; tests assert behaviour, this prints numbers (docs/node-agent.md quotes them).
Targets (DESIGN.md §9, issue 15): Allocate p99 <= 50 ms; re-registration p99 <= 50 ms after
kubelet.sock reappears; RSS <= 64 MiB with 8 mock devices after 10,000 scrapes, and no
growth between the 1,000th and the 10,000th, measured as the image runs the agent (its
console script, the chart's arguments and files, every vendor wheel installed: issue 36).

Everything talks over the real transports: the agent's Kubernetes client over HTTP to a
local fake API server, kubelet's gRPC over unix sockets (the fake kubelet), and the scrapes
over HTTP to a separate ``xpushare node`` process. The Allocate figures use a minimal API
server defined here (a dict, merge patches): kmock keeps every object's version history and
replays it on reads, which makes its answers slower with every write and would time kmock
rather than the agent. The memory run uses kmock, where only the agent's process counts.

    uv run python benchmarks/bench_node.py            # all three
    uv run python benchmarks/bench_node.py --pods 200 --restarts 10 --scrapes 2000
    uv run python benchmarks/bench_node.py --memory-only     # the memory figures alone
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from kmock import KubernetesEmulator, Server, resource

from xpushare.codec import (
    ASSIGNMENT_KEY,
    HANDOFF_KEY,
    Handoff,
    encode_assignment,
    encode_handoff,
    handoff_lease_name,
)
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment, PodRef
from xpushare.node import KubeClient, NodeAgent, NodeConfig
from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS, mock
from xpushare.testing.kube import merge_patch
from xpushare.testing.kubelet import FakeKubelet

NODE = "bench-node"
RESOURCE = "xpushare.io/mock-gpu"
NODES = resource("", "v1", "nodes")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def short_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="xpb", dir="/tmp"))


def add_node(api: KubernetesEmulator) -> None:
    api.objects[NODES, None, NODE] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "annotations": {}, "labels": {}},
    }


def mock_host() -> PluginHost:
    host = PluginHost(
        HostSettings(strict=True),
        core_plugins=CORE_PLUGINS,
        node_name=NODE,
        vendor_config={"mock": {"devices": "8x A100-80GB"}},
    )
    host.register("mock", mock)
    return host


class TinyApiServer:
    """Nodes, handoff Leases and pods in dicts behind the URL shapes the agent uses: an API
    server whose answer time does not grow with the number of writes."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        #: Handoff Leases by name (any namespace: the agent asks for its own only).
        self.leases: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> TinyApiServer:
        app = web.Application()
        app.router.add_get("/api/v1/nodes/{name}", self._get_node)
        app.router.add_patch("/api/v1/nodes/{name}", self._patch_node)
        leases = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}"
        app.router.add_get(leases, self._get_lease)
        app.router.add_patch(leases, self._patch_lease)
        app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}", self._get_pod)
        app.router.add_get("/api/v1/pods", self._list_pods)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def _get_node(self, request: web.Request) -> web.Response:
        node = self.nodes.get(request.match_info["name"])
        return web.json_response(node) if node else web.json_response({}, status=404)

    async def _patch_node(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        patch = await request.json()
        patch.get("metadata", {}).pop("resourceVersion", None)
        self.nodes[name] = merge_patch(self.nodes[name], patch)
        return web.json_response(self.nodes[name])

    async def _get_lease(self, request: web.Request) -> web.Response:
        lease = self.leases.get(request.match_info["name"])
        return web.json_response(lease) if lease else web.json_response({}, status=404)

    async def _patch_lease(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.leases:
            return web.json_response({}, status=404)
        patch = await request.json()
        patch.get("metadata", {}).pop("resourceVersion", None)
        self.leases[name] = merge_patch(self.leases[name], patch)
        return web.json_response(self.leases[name])

    async def _get_pod(self, request: web.Request) -> web.Response:
        pod = self.pods.get((request.match_info["ns"], request.match_info["name"]))
        return web.json_response(pod) if pod else web.json_response({}, status=404)

    async def _list_pods(self, request: web.Request) -> web.Response:
        return web.json_response({"items": list(self.pods.values())})


async def bench_allocate(pods: int, restarts: int) -> None:
    plugin_dir = short_dir()
    async with TinyApiServer() as api:
        api.nodes[NODE] = {"metadata": {"name": NODE, "annotations": {}, "labels": {}}}
        kube = KubeClient.for_host(NODE, api.url)
        host = mock_host()
        # Production intervals: re-registration is measured as an operator would see it.
        config = NodeConfig(
            node_name=NODE,
            device_plugin_dir=plugin_dir,
            metrics_host="127.0.0.1",
            metrics_port=0,
            partition_lock_path=None,
        )
        agent = NodeAgent(config, host, kube)
        async with FakeKubelet(plugin_dir) as kubelet:
            run = asyncio.create_task(agent.run())
            await kubelet.wait_until(lambda: kubelet.allocatable(RESOURCE) == 80, timeout_s=30)
            allocate_ms: list[float] = []
            preferred_ms: list[float] = []
            for i in range(pods):
                device = f"MOCK-{NODE}-{i % 8}"
                ref = PodRef(namespace="default", name=f"p{i}", uid=f"u{i}")
                assignment = PodAssignment(
                    node=NODE,
                    containers=(
                        ContainerAssignment(
                            container="main",
                            vendor="mock",
                            devices=(
                                DeviceSlice(device_id=device, memory_mib=4096, compute_percent=10),
                            ),
                        ),
                    ),
                )
                api.pods["default", ref.name] = {
                    "metadata": {
                        "name": ref.name,
                        "namespace": "default",
                        "uid": ref.uid,
                        "annotations": {ASSIGNMENT_KEY: encode_assignment(assignment)},
                    },
                    "spec": {"nodeName": NODE},
                    "status": {"phase": "Pending"},
                }
                handoff = Handoff.begin(ref, ["mock"], now=time.time(), ttl_s=30)
                api.leases[handoff_lease_name(NODE)] = {
                    "metadata": {
                        "name": handoff_lease_name(NODE),
                        "annotations": {HANDOFF_KEY: encode_handoff(handoff)},
                    },
                    "spec": {"holderIdentity": NODE},
                }
                available = [d for d, h in kubelet.devices(RESOURCE).items() if h == "Healthy"]
                start = time.perf_counter()
                picked = await kubelet.get_preferred_allocation(RESOURCE, available, [], 1)
                preferred_ms.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                await kubelet.allocate(RESOURCE, picked)
                allocate_ms.append((time.perf_counter() - start) * 1000)
                api.pods["default", ref.name]["status"]["phase"] = "Running"
            print(
                f"Allocate ({pods} pods, real client over HTTP, gRPC over unix "
                f"sockets): p50 {statistics.median(allocate_ms):.1f} ms, "
                f"p99 {percentile(allocate_ms, 99):.1f} ms, max {max(allocate_ms):.1f} ms "
                "(target p99 <= 50 ms)"
            )
            print(
                f"GetPreferredAllocation: p50 {statistics.median(preferred_ms):.1f} ms, "
                f"p99 {percentile(preferred_ms, 99):.1f} ms"
            )
            delays: list[float] = []
            for _ in range(restarts):
                before = len(kubelet.registrations)
                await kubelet.restart()
                reappeared = kubelet.started_at
                await kubelet.wait_until(
                    lambda b=before: len(kubelet.registrations) > b, timeout_s=30
                )
                delays.append(kubelet.registrations[-1].at - reappeared)
            mode = "inotify" if agent.dirwatch.inotify else "polling"
            ms = [d * 1000 for d in delays]
            print(
                f"re-registration after kubelet.sock reappears ({restarts} restarts, {mode}, "
                f"{config.socket_poll_s:g} s poll beneath): p50 {statistics.median(ms):.1f} ms, "
                f"p99 {percentile(ms, 99):.1f} ms, max {max(ms):.1f} ms (target p99 <= 50 ms)"
            )
            await agent.stop()
            with contextlib.suppress(Exception):
                await run
        kube.close()
        host.close()
    shutil.rmtree(plugin_dir, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


#: What the chart gives the agent (deploy/helm/xpushare/templates/node-agent.yaml and
#: values.yaml's nodeAgent defaults), in the chart's words.
CHART_ARGS = (
    "--detect-interval=60",
    "--monitor-interval=15",
    "--reconcile-interval=120",
    "--allocate-deadline=8",
)
MOCK_DEVICES = "8x A100-80GB"


async def agent_memory(scrapes: int, *, allow_list: bool) -> None:
    """RSS of ``xpushare node`` run as the image and the chart run it: the console script
    (the image's entry point), the chart's arguments and its per-vendor files, the mock
    vendor with 8 devices, every vendor wheel of the workspace installed. *allow_list* as
    the chart sets it (``XPUSHARE_PLUGINS`` = the enabled vendors, here ``mock``); without
    it every installed vendor is loaded, and the agent serves the mock's devices beside
    eleven vendors that find no library. Only the API server differs: a local emulator over
    plain HTTP (``--api-server``) where a pod has its service account over TLS."""
    plugin_dir = short_dir()
    config_dir = short_dir()
    (config_dir / "node-vendors.yaml").write_text(
        f"vendors:\n  mock: {{devices: {MOCK_DEVICES}}}\n"
    )
    (config_dir / "mock.yaml").write_text(f"devices: {MOCK_DEVICES}\n")
    port = free_port()
    # The image's entry point: the console script beside this interpreter.
    program = Path(sys.executable).with_name("xpushare")
    async with KubernetesEmulator() as api, Server(api) as server:
        add_node(api)
        env = {
            **os.environ,
            "NODE_NAME": NODE,
            "XPUSHARE_MOCK_CONFIG": str(config_dir / "mock.yaml"),
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        env.pop("XPUSHARE_PLUGINS", None)
        if allow_list:
            env["XPUSHARE_PLUGINS"] = "mock"
        async with FakeKubelet(plugin_dir) as kubelet:
            process = await asyncio.create_subprocess_exec(
                str(program),
                "node",
                f"--vendor-config={config_dir / 'node-vendors.yaml'}",
                f"--device-plugin-dir={plugin_dir}",
                f"--metrics-port={port}",
                *CHART_ARGS,
                "--metrics-host=127.0.0.1",
                f"--api-server={str(server.url).rstrip('/')}",
                "--partition-lock=",
                env=env,
            )
            try:
                await kubelet.wait_until(lambda: kubelet.allocatable(RESOURCE) == 80, timeout_s=60)
                url = f"http://127.0.0.1:{port}"
                async with aiohttp.ClientSession() as session:
                    await wait_ready(session, url)
                    marks: dict[int, int] = {0: rss_kib(process.pid)}
                    for i in range(1, scrapes + 1):
                        async with session.get(f"{url}/metrics") as response:
                            await response.read()
                        if i in (1, 1000, scrapes):
                            marks[i] = rss_kib(process.pid)
                loaded = (
                    "mock only (XPUSHARE_PLUGINS=mock, as the chart)"
                    if allow_list
                    else ("every installed vendor (no XPUSHARE_PLUGINS)")
                )
                print(f"node agent as the image runs it, {loaded}:")
                for i, kib in sorted(marks.items()):
                    print(f"  RSS after {i:>6} scrapes: {kib / 1024:.1f} MiB")
                if 1000 in marks and scrapes > 1000:
                    growth = (marks[scrapes] - marks[1000]) / 1024
                    print(
                        f"  growth 1,000th -> {scrapes:,}th scrape: {growth:+.1f} MiB "
                        "(target: none; RSS target <= 64 MiB)"
                    )
            finally:
                process.send_signal(signal.SIGTERM)
                async with asyncio.timeout(30):
                    await process.wait()
    shutil.rmtree(plugin_dir, ignore_errors=True)
    shutil.rmtree(config_dir, ignore_errors=True)


async def wait_ready(session: aiohttp.ClientSession, url: str) -> None:
    """Until ``/readyz`` says ready (the figures are of a running agent, not a starting one),
    and a little more: once ready, the agent gives back the heap its start-up freed."""
    for _ in range(600):
        async with session.get(f"{url}/readyz") as response:
            if response.status == 200:
                await asyncio.sleep(3)
                return
        await asyncio.sleep(0.1)
    raise RuntimeError("the node agent did not become ready within a minute")


async def bench_memory(scrapes: int) -> None:
    await agent_memory(scrapes, allow_list=True)
    await agent_memory(scrapes, allow_list=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=500, help="Allocate calls to time")
    parser.add_argument("--restarts", type=int, default=20, help="kubelet restarts to time")
    parser.add_argument("--scrapes", type=int, default=10_000, help="/metrics scrapes")
    parser.add_argument("--memory-only", action="store_true", help="only the RSS figures")
    args = parser.parse_args()
    if not args.memory_only:
        asyncio.run(bench_allocate(args.pods, args.restarts))
    asyncio.run(bench_memory(args.scrapes))


if __name__ == "__main__":
    main()

"""Benchmark of the web view (docs/web-view.md), and the screenshots of its pages.

Targets (issues 19 and 35): the fleet page for 5,000 nodes x 8 GPUs answers its API call in
<= 100 ms with a compressed answer of <= 300 kB, paints its overview in <= 0.5 s and the whole
page (the heat map of every device drawn) in <= 1 s; a bind shows on the page within 2 s.

What it does: the fake API server holds ``--nodes`` nodes of 8 mock GPUs in three models
with about half the GPUs booked by bound pods; the real scheduler (web view on) lists and
watches it with the real ``kubernetes`` client. The fleet API is timed server side (its
``Server-Timing`` header) and end to end; the page is opened in Debian's headless
chromium (``xpushare.testing.browser``) and timed from navigation to the heat map drawn;
then pods are bound over /bind and the time until the open page shows each is measured.

    uv run python benchmarks/bench_web.py                   # 5,000 nodes
    uv run python benchmarks/bench_web.py --nodes 500       # quicker
    uv run python benchmarks/bench_web.py --screenshots docs/images --nodes 24

The screenshots' Prometheus is a stand-in (:func:`stand_in_prometheus`): no Prometheus runs
here, so the fleet page's history and the node page's live usage are drawn from series it
makes up from the ledger's bookings (allocated rising to what is booked now, in use some 60
to 70 % of it). The pages and the API calls behind them are the real ones.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web as aioweb

from xpushare.codec import encode_assignment, encode_inventory
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.plugins import PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS, mock
from xpushare.scheduler import Scheduler, load_config
from xpushare.scheduler.kube import Kube, KubeSettings
from xpushare.testing.apiserver import FakeApiServer, node, pod
from xpushare.testing.browser import headless_chromium
from xpushare.testing.localhttp import serve_local

MODELS = ("A100-80GB", "H100-80GB", "L40S-48GB")
GPUS = 8


def build(api: FakeApiServer, nodes: int) -> list[str]:
    names = []
    for i in range(nodes):
        name = f"gpu-{i:05d}"
        names.append(name)
        model = MODELS[i % len(MODELS)]
        devices = mock.parse_spec(f"{GPUS}x {model}", name)
        labels = {"pool": ["train", "infer"][i % 2], "zone": f"z{i % 3}"}
        api.put(
            "nodes",
            node(
                name,
                {"xpushare.io/inventory-mock": encode_inventory("mock", name, devices)},
                labels,
            ),
        )
        if i % 7 == 6:
            continue  # some nodes stay empty: room for the binds measured below
        for k, d in enumerate(devices[: (i % 5) + 2]):
            memory = d.memory_mib // (2 + (i + k) % 3)
            assignment = PodAssignment(
                node=name,
                containers=(
                    ContainerAssignment(
                        container="main",
                        vendor="mock",
                        devices=(
                            DeviceSlice(
                                device_id=d.id, memory_mib=memory, compute_percent=20 + 10 * (k % 5)
                            ),
                        ),
                    ),
                ),
            )
            obj = pod(
                f"job-{i}-{k}",
                namespace=["ml", "research", "serving"][k % 3],
                node_name=name,
                phase="Running",
                annotations={"xpushare.io/assignment": encode_assignment(assignment)},
            )
            api.put("pods", obj)
    return names


async def start(api: FakeApiServer, prometheus: str | None = None) -> tuple[Scheduler, Kube]:
    settings: dict[str, Any] = {
        "server.host": "127.0.0.1",
        "server.port": 0,
        "server.metrics_port": 0,
        "leader.enabled": False,
        "web.enabled": True,
        "web.port": 0,
    }
    if prometheus:
        settings["web.prometheus_url"] = prometheus
    config = load_config(environ={}, overrides=settings)
    kube = await Kube.connect(KubeSettings(server=api.url))
    host = PluginHost(core_plugins=CORE_PLUGINS)
    host.register("mock", mock)
    scheduler = Scheduler(config, host=host, kube=kube)
    await scheduler.start()
    await scheduler.wait_synced(600)
    return scheduler, kube


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench(nodes: int, binds: int) -> None:
    async with FakeApiServer(history=1_000_000) as api:
        t = time.perf_counter()
        names = build(api, nodes)
        scheduler, kube = await start(api)
        print(
            f"fleet: {nodes} nodes x {GPUS} GPUs, {len(api.items('pods'))} pods "
            f"(synced in {time.perf_counter() - t:.1f} s)"
        )
        web = f"http://127.0.0.1:{scheduler.ports['web']}"
        main = f"http://127.0.0.1:{scheduler.ports['main']}"
        async with aiohttp.ClientSession(auto_decompress=False) as http:
            server, wall, size = [], [], 0
            for i in range(21):
                t = time.perf_counter()
                gzip = {"Accept-Encoding": "gzip"}
                async with http.get(f"{web}/api/v1/fleet", headers=gzip) as response:
                    body = await response.read()
                    timing = response.headers["Server-Timing"]
                    assert response.headers.get("Content-Encoding") == "gzip"
                elapsed = (time.perf_counter() - t) * 1000
                dur = float(timing.split("dur=")[1])
                if i == 0:
                    identity = {"Accept-Encoding": "identity"}
                    async with http.get(f"{web}/api/v1/fleet", headers=identity) as plain:
                        raw = len(await plain.read())
                    print(
                        f"fleet API, first call after the sync: server {dur:.1f} ms, "
                        f"end to end {elapsed:.1f} ms, {len(body) / 1e3:.0f} kB gzip "
                        f"({raw / 1e6:.2f} MB uncompressed)"
                    )
                    continue
                server.append(dur)
                wall.append(elapsed)
                size = len(body)
            print(
                f"fleet API, 20 calls: server p50 {statistics.median(server):.1f} ms, "
                f"p99 {pct(server, 0.99):.1f} ms; end to end p50 {statistics.median(wall):.1f} ms, "
                f"p99 {pct(wall, 0.99):.1f} ms ({size / 1e3:.0f} kB gzip)"
            )
            async with http.get(f"{web}/api/v1/fleet", params={"model": "H100-80GB"}) as response:
                dur = float(response.headers["Server-Timing"].split("dur=")[1])
                print(f"fleet API filtered by model: server {dur:.1f} ms")
            async with headless_chromium() as page:
                renders = []
                for _ in range(3):
                    await page.goto("about:blank")
                    t = time.perf_counter()
                    await page.goto(f"{web}/#/fleet")
                    await page.wait_for_selector("main[data-heat]", timeout=60_000)
                    outside = (time.perf_counter() - t) * 1000
                    overview, whole, cells = await page.evaluate(
                        "() => { const m = document.getElementById('main').dataset;"
                        " return [Number(m.rendered) - performance.timeOrigin,"
                        " Number(m.heat) - performance.timeOrigin,"
                        " Number(document.getElementById('heatmap').dataset.cells)]; }"
                    )
                    renders.append((overview, whole, outside, cells))
                for overview, whole, outside, cells in renders:
                    print(
                        f"fleet page: overview painted {overview:.0f} ms, whole page (heat "
                        f"map of {cells} devices) {whole:.0f} ms after navigation start "
                        f"(seen by the driver after {outside:.0f} ms)"
                    )
                empty = [n for i, n in enumerate(names) if i % 7 == 6][:binds]
                delays = []
                for k, target in enumerate(empty):
                    before = await page.evaluate(
                        "() => document.getElementById('main').dataset.rendered"
                    )
                    obj = api.put(
                        "pods",
                        pod(
                            f"probe-{k}",
                            limits={"xpushare.io/mock-gpu": "1", "xpushare.io/mock-gpumem": "1000"},
                        ),
                    )
                    args = {
                        "PodName": obj["metadata"]["name"],
                        "PodNamespace": "default",
                        "PodUID": obj["metadata"]["uid"],
                        "Node": target,
                    }
                    async with http.post(f"{main}/bind", json=args) as response:
                        assert (await response.json()) == {"Error": ""}
                    t = time.perf_counter()
                    await page.wait_for_function(
                        "(before) => document.getElementById('main').dataset.rendered !== before",
                        arg=before,
                        timeout=10_000,
                    )
                    delays.append((time.perf_counter() - t) * 1000)
                print(
                    f"bind to page updated ({len(delays)} binds): "
                    + ", ".join(f"{d:.0f}" for d in delays)
                    + " ms"
                )
        await scheduler.stop()
        await kube.close()


async def stand_in_prometheus(
    fleet: dict[str, Scheduler],
) -> tuple[aioweb.AppRunner, str]:
    """A local Prometheus for the screenshots (its runner and URL), answering the view's
    queries from ``fleet["scheduler"]``'s ledger: the history's two range queries, and each
    device's utilisation and memory in use for a node's instant queries. Made-up figures,
    labelled as such in docs/web-view.md; read on the scheduler's loop, where it runs."""

    def booked(only: str | None = None) -> list[tuple[str, Any, int]]:
        """(node, device, MiB booked) of every device, or of node *only*'s."""
        ledger = fleet["scheduler"].ledger
        out: list[tuple[str, Any, int]] = []
        names = list(ledger.nodes) if only is None else [only] if only in ledger.nodes else []
        for name in names:
            usage = ledger.device_usage(name, "mock")  # one call a node: 40,000 devices
            out.extend((name, d, usage[d.id].used_memory_mib) for d in ledger.devices(name))
        return out

    async def query_range(request: aioweb.Request) -> aioweb.Response:
        q = request.query
        start, end, step = float(q["start"]), float(q["end"]), int(q["step"])
        now = sum(mib for _, _, mib in booked())
        points = []
        for i in range(int((end - start) // step) + 1):
            at = start + i * step
            share = (at - start) / max(end - start, 1)
            allocated = now * (0.7 + 0.3 * share)  # pods arriving over the hour
            used = allocated * (0.65 + 0.05 * math.sin(at / 600))
            points.append([at, str(allocated if "allocated" in q["query"] else used)])
        result = [{"metric": {}, "values": points}]
        return aioweb.json_response(
            {"status": "success", "data": {"resultType": "matrix", "result": result}}
        )

    async def query(request: aioweb.Request) -> aioweb.Response:
        text = request.query["query"]
        node = re.search(r'node="([^"]*)"', text)
        result = []
        if node and text.startswith(("xpushare_device_utilization", "xpushare_device_memory")):
            for name, d, mib in booked(node.group(1)):
                share = mib / d.memory_mib if d.memory_mib else 0.0
                value = 0.05 + 0.8 * share if "utilization" in text else mib * 0.7 * 1024 * 1024
                result.append(
                    {"metric": {"node": name, "device": d.id}, "value": [time.time(), str(value)]}
                )
        return aioweb.json_response(
            {"status": "success", "data": {"resultType": "vector", "result": result}}
        )

    return await serve_local({"/api/v1/query_range": query_range, "/api/v1/query": query})


async def fleet_screenshot(directory: Path, nodes: int) -> None:
    """The fleet page alone, at *nodes* nodes: web-fleet-<nodes>.png."""
    directory.mkdir(parents=True, exist_ok=True)
    fleet: dict[str, Scheduler] = {}
    prometheus, prometheus_url = await stand_in_prometheus(fleet)
    async with FakeApiServer(history=1_000_000) as api:
        build(api, nodes)
        scheduler, kube = await start(api, prometheus_url)
        fleet["scheduler"] = scheduler
        web = f"http://127.0.0.1:{scheduler.ports['web']}"
        async with headless_chromium(1400, 900) as page:
            await page.goto(f"{web}/#/fleet")
            await page.wait_for_selector(
                "main[data-heat] [data-testid=history-chart][data-points]", timeout=60_000
            )
            await page.screenshot(path=str(directory / f"web-fleet-{nodes}.png"), full_page=True)
        await scheduler.stop()
        await kube.close()
    await prometheus.cleanup()
    print(f"screenshot in {directory}")


async def screenshots(directory: Path, nodes: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    fleet: dict[str, Scheduler] = {}
    prometheus, prometheus_url = await stand_in_prometheus(fleet)
    async with FakeApiServer() as api:
        build(api, nodes)
        scheduler, kube = await start(api, prometheus_url)
        fleet["scheduler"] = scheduler
        web = f"http://127.0.0.1:{scheduler.ports['web']}"
        main = f"http://127.0.0.1:{scheduler.ports['main']}"
        big = api.put(
            "pods",
            pod(
                "train-70b",
                namespace="ml",
                limits={"xpushare.io/mock-gpu": "8", "xpushare.io/mock-gpumem": "60000"},
            ),
        )
        big["spec"]["schedulerName"] = "xpushare-scheduler"
        api.put("pods", big)
        async with aiohttp.ClientSession() as http:
            await http.post(
                f"{main}/filter", json={"Pod": big, "NodeNames": list(scheduler.ledger.nodes)}
            )
        await scheduler.events.flush()
        spec = (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: notebook, namespace: research}\nspec:\n"
            "  containers:\n  - name: main\n    resources:\n      limits:\n"
            "        xpushare.io/mock-gpu: '1'\n        xpushare.io/mock-gpumem: '20000'\n"
            "        xpushare.io/mock-gpucores: '30'\n"
        )
        async with headless_chromium(1280, 820) as page:
            # (name, route, what shows the page is complete, the whole page or the window):
            # the pod page's per-node explanations run on for screens, the window shows
            # its summary and groups.
            pages = [
                (
                    "fleet",
                    "#/fleet",
                    "main[data-heat] [data-testid=history-chart][data-points]",
                    True,
                ),
                ("node", "#/node/gpu-00003", "td[data-k=live_util]:not(:empty)", True),
                ("pod", "#/pod/ml/train-70b", "[data-testid=fit]", False),
                ("search", "#/search?q=job-1", "[data-testid=pod-hit]", True),
            ]
            for name, route, ready, whole in pages:
                await page.goto(f"{web}/{route}")
                await page.wait_for_selector(ready, timeout=30_000)
                await page.screenshot(path=str(directory / f"web-{name}.png"), full_page=whole)
            await page.goto(f"{web}/#/whatif")
            await page.fill("[data-testid=whatif-spec]", spec)
            await page.click("[data-testid=whatif-go]")
            await page.wait_for_selector("#whatif-result[data-done]", timeout=30_000)
            await page.screenshot(path=str(directory / "web-whatif.png"), full_page=True)
        await scheduler.stop()
        await kube.close()
    await prometheus.cleanup()
    print(f"screenshots in {directory}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--binds", type=int, default=5)
    parser.add_argument("--screenshots", type=Path, help="write page screenshots here instead")
    parser.add_argument(
        "--fleet-only", action="store_true", help="with --screenshots: the fleet page alone"
    )
    args = parser.parse_args()
    if args.screenshots and args.fleet_only:
        asyncio.run(fleet_screenshot(args.screenshots, args.nodes))
    elif args.screenshots:
        asyncio.run(screenshots(args.screenshots, args.nodes))
    else:
        asyncio.run(bench(args.nodes, args.binds))


if __name__ == "__main__":
    main()

"""Benchmark of ``xpushare scheduler``'s event loop under the hostile mix (issue 31, defects 5-6).

Why: the extender, the webhook, the watches and the probes share one event loop, so what one
request costs is how long every other waits. A pod of 10,000 one-GPU containers held
``/filter`` for 9-14 s, and two what-if clients of the web view moved ``/filter`` from 1-3 ms
to a quarter of a second and more. This script measures what a normal ``/filter`` waits, and
how late the loop runs, with and without hostile clients beside it. Timings are printed,
never asserted (shared 2-core machines are noisy).

What it does: a fake API server (``xpushare.testing.apiserver``) in a child process holds
``--nodes`` nodes of 8 mock GPUs; the scheduler runs in this process, as
``xpushare scheduler`` does (its informers, HTTP server, webhook and web view), with a timer
of this script's due every 5 ms on its loop whose lateness is recorded: the loop's lag, what
a request arriving then waits before it is even read. A client process (kube-scheduler's
side) sends ``/filter`` for a one-GPU pod with ``--candidates`` node names, one after the
other, and records each answer's time end to end. Two phases of ``--seconds`` each:

* quiet: that client alone;
* hostile: beside it, a second process sends, each from its own task and in a loop, a pod
  of ``--huge`` one-GPU containers to ``/filter`` (200 candidates) and to the webhook, a
  ``/filter`` naming 100,000 nodes, a pod of 256 containers each its own demand to
  ``/filter`` over every node (at the container bound: worked out in slices), and two
  what-if clients of the web view (a pod of 2,000 containers, then the 256-container one).

It runs against whatever tree is installed, so the same command measures the code before a
change (``git worktree add /tmp/old <commit>``, then run it there with
``PYTHONPATH=/tmp/old/core/src``). ``xpushare_scheduler_loop_lag_seconds`` is the same
measure, kept by the scheduler itself (every 20 ms), where the tree has it.

    uv run python benchmarks/bench_looplag.py                 # 1,000 nodes, 20 s a phase
    uv run python benchmarks/bench_looplag.py --quick         # CI: 40 nodes, 2 s a phase
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import io
import json
import multiprocessing
import random
import statistics
import time
from typing import Any

import aiohttp

GPUS = 8
GPU = "xpushare.io/mock-gpu"
MEM = "xpushare.io/mock-gpumem"
#: The lag timer's period: fine enough to see a stall of a few milliseconds.
TICK_S = 0.005


def _cluster(queue: Any, nodes: int) -> None:
    """Child process: the API server with ``nodes`` nodes of 8 GPUs (80 GiB)."""
    from xpushare.codec import encode_inventory
    from xpushare.plugins.builtin.mock import parse_spec
    from xpushare.testing.apiserver import FakeApiServer, node

    async def main() -> None:
        api = FakeApiServer(history=100_000)
        await api.start()
        for i in range(nodes):
            name = f"node-{i:05d}"
            devices = parse_spec(f"{GPUS}x A100-80GB", name)
            inventory = encode_inventory("mock", name, devices)
            api.put("nodes", node(name, {"xpushare.io/inventory-mock": inventory}))
        queue.put(api.port)
        await asyncio.Event().wait()

    asyncio.run(main())


def many(name: str, count: int, *, distinct: bool = False) -> dict[str, Any]:
    """A pod of *count* one-GPU containers (each its own memory ask when *distinct*)."""
    from xpushare.testing.apiserver import pod

    obj = pod(name, limits={GPU: "1", MEM: "1000"})
    first = obj["spec"]["containers"][0]
    containers = []
    for i in range(count):
        c = copy.deepcopy(first)
        c["name"] = f"c{i}"
        if distinct:
            c["resources"]["limits"][MEM] = str(100 + i)
        containers.append(c)
    obj["spec"]["containers"] = containers
    return obj


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "bench",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "object": obj,
        },
    }


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99, ordered[-1]


def _normal(results: Any, base: str, nodes: int, candidates: int, seconds: float) -> None:
    """Child process: kube-scheduler's /filter, one after the other; each end to end (ms)."""
    from xpushare.testing.apiserver import pod

    names = [f"node-{i:05d}" for i in range(nodes)]
    rng = random.Random(1)

    async def main() -> list[float]:
        samples: list[float] = []
        async with aiohttp.ClientSession() as http:
            stop = time.perf_counter() + seconds
            i = 0
            while time.perf_counter() < stop:
                i += 1
                want = pod(f"p-{i}", limits={GPU: "1", MEM: str(1000 + i % 64)})
                body = {"Pod": want, "NodeNames": rng.sample(names, min(candidates, nodes))}
                started = time.perf_counter()
                async with http.post(f"{base}/filter", json=body) as r:
                    data = await r.json()
                samples.append((time.perf_counter() - started) * 1000)
                if r.status != 200 or not data["NodeNames"]:
                    raise RuntimeError(f"/filter failed: {r.status} {str(data)[:300]}")
        return samples

    try:
        results.put(asyncio.run(main()))
    except Exception as exc:  # reported to the parent
        results.put(f"{type(exc).__name__}: {exc}")


def _hostile(results: Any, base: str, web: str, nodes: int, huge: int, seconds: float) -> None:
    """Child process: the hostile mix, each kind in a loop from a task of its own; puts the
    count of requests answered per kind (and the statuses seen)."""
    names = [f"node-{i:05d}" for i in range(nodes)]
    pod = many("huge", huge)
    wide = many("wide", 256, distinct=True)
    whatif_pod = many("whatif", 2_000)
    one = many("one", 1)
    bodies = {
        "filter, huge pod": (f"{base}/filter", json.dumps({"Pod": pod, "NodeNames": names[:200]})),
        "webhook, huge pod": (f"{base}/mutate", json.dumps(review(pod))),
        "filter, 100,000 names": (
            f"{base}/filter",
            json.dumps({"Pod": one, "NodeNames": [f"ghost-{i}" for i in range(100_000)]}),
        ),
        "filter, 256 demands x every node": (
            f"{base}/filter",
            json.dumps({"Pod": wide, "NodeNames": names}),
        ),
    }
    whatifs = [json.dumps(whatif_pod), json.dumps(wide)]

    async def loop(http: aiohttp.ClientSession, url: str, texts: list[str], tally: Any) -> None:
        stop = time.perf_counter() + seconds
        i = 0
        while time.perf_counter() < stop:
            data = io.BytesIO(texts[i % len(texts)].encode())
            i += 1
            headers = {"Content-Type": "application/json"}
            async with http.post(url, data=data, headers=headers) as r:
                await r.read()
                tally[r.status] = tally.get(r.status, 0) + 1

    async def main() -> dict[str, dict[int, int]]:
        timeout = aiohttp.ClientTimeout(total=None)
        tallies: dict[str, dict[int, int]] = {}
        async with aiohttp.ClientSession(timeout=timeout) as http:
            tasks = []
            for label, (url, text) in bodies.items():
                tally = tallies[label] = {}
                tasks.append(loop(http, url, [text], tally))
            for n in range(2):
                tally = tallies[f"what-if client {n + 1}"] = {}
                tasks.append(loop(http, f"{web}/api/v1/whatif", whatifs, tally))
            await asyncio.gather(*tasks)
        return tallies

    try:
        results.put(asyncio.run(main()))
    except Exception as exc:  # reported to the parent
        results.put(f"{type(exc).__name__}: {exc}")


async def lag_sampler(samples: list[float]) -> None:
    """On the scheduler's loop: how late a timer due every TICK_S fires (ms)."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + TICK_S
        await asyncio.sleep(TICK_S)
        samples.append(max(0.0, loop.time() - due) * 1000)


def line(label: str, samples: list[float]) -> str:
    p50, p99, top = percentiles(samples)
    return (
        f"  {label:<34} n={len(samples):>6}  p50 {p50:8.2f} ms  p99 {p99:8.2f} ms  "
        f"max {top:8.1f} ms"
    )


async def main(args: argparse.Namespace) -> None:
    from xpushare.plugins import PluginHost
    from xpushare.plugins.builtin import CORE_PLUGINS, mock
    from xpushare.scheduler import Scheduler, load_config
    from xpushare.scheduler.kube import Kube, KubeSettings

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_cluster, args=(queue, args.nodes), daemon=True)
    child.start()
    port = queue.get(timeout=600)
    host = PluginHost(core_plugins=CORE_PLUGINS)
    host.register("mock", mock)
    config = load_config(
        environ={},
        overrides={
            "server.host": "127.0.0.1",
            "server.port": 0,
            "server.metrics_port": 0,
            "leader.enabled": False,
            "web.enabled": True,
            "web.port": 0,
        },
    )
    kube = await Kube.connect(KubeSettings(server=f"http://127.0.0.1:{port}"))
    scheduler = Scheduler(config, host=host, kube=kube)
    await scheduler.start()
    await scheduler.wait_synced(600)
    base = f"http://127.0.0.1:{scheduler.ports['main']}"
    web = f"http://127.0.0.1:{scheduler.ports['web']}"
    print(
        f"{args.nodes} nodes x {GPUS} GPUs; /filter of a one-GPU pod, {args.candidates} "
        f"candidates, one after the other; {args.seconds:g} s a phase; hostile pods of "
        f"{args.huge:,} containers",
        flush=True,
    )
    lags: list[float] = []
    sampler = asyncio.create_task(lag_sampler(lags))
    try:
        for phase in ("quiet", "hostile"):
            results = ctx.Queue()
            normal = ctx.Process(
                target=_normal,
                args=(results, base, args.nodes, args.candidates, args.seconds),
                daemon=True,
            )
            procs = [normal]
            if phase == "hostile":
                procs.append(
                    ctx.Process(
                        target=_hostile,
                        args=(results, base, web, args.nodes, args.huge, args.seconds),
                        daemon=True,
                    )
                )
            lags.clear()
            for p in procs:
                p.start()
            got: list[Any] = []
            for _ in procs:
                got.append(await asyncio.to_thread(results.get, True, 3600))
            window = list(lags)
            for p in procs:
                p.join(60)
            for item in got:
                if isinstance(item, str):
                    raise RuntimeError(f"a client failed: {item}")
            filters = next(g for g in got if isinstance(g, list))
            print(f"{phase}:", flush=True)
            print(line("event loop lag (5 ms timer)", window), flush=True)
            print(line("/filter end to end", filters), flush=True)
            for item in got:
                if isinstance(item, dict):
                    for label, tally in item.items():
                        statuses = ", ".join(f"{n} x {s}" for s, n in sorted(tally.items()))
                        print(f"  {label:<34} answered: {statuses or 'none'}", flush=True)
    finally:
        sampler.cancel()
        await scheduler.stop()
        await kube.close()
        child.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--candidates", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--huge", type=int, default=10_000, help="containers of the huge pod")
    parser.add_argument("--quick", action="store_true", help="CI's short run")
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.nodes, arguments.candidates, arguments.seconds = 40, 20, 2.0
    asyncio.run(main(arguments))

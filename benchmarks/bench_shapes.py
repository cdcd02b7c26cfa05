"""Benchmark of ``xpushare scheduler`` under varied requests: memory and /filter time.

Why: every distinct request shape used to be kept for ever (the learnt workload, the node
memos, the placer's keys), so a cluster whose pods ask many distinct memory sizes grew the
scheduler without bound and slowed every decision (issue 13, defect 4). This script checks
the bounds where they matter: the real scheduler process, its informers and HTTP server,
5,000 nodes, 100,000 requests with distinct shapes.

What it does, per vendor (each in a fresh process, so one vendor's memory does not count
for the other): a fake API server (``xpushare.testing.apiserver``) in a child process holds
``--nodes`` nodes of 8 GPUs (80 GiB), half of them occupied by bound pods; the scheduler runs
in this process with the real ``kubernetes`` client and the default placement policy
(``fgd-cpu``, which learns the workload), and a client in a second child process (as
kube-scheduler is a process of its own) sends it kube-scheduler-shaped ``/filter``
requests over HTTP, ``--candidates`` node names each (kube-scheduler's sample of a
5,000-node cluster), each followed by the ``/prioritize`` of the nodes that passed. Times
are server side (``Server-Timing``); RSS is this process's, the scheduler's alone.

* ``mock``: the core's mock vendor, decided with the core's fit (shared per node state);
* ``nvidia``: the ``xpushare-nvidia`` plugin, which has a fit hook of its own, so every
  candidate node is asked through it and answers are kept per node (the path where the
  unbounded memos were largest).

Phases: ``5 shapes`` (``--warm`` requests cycling five memory sizes), then ``distinct``
(``--requests`` requests, no two of the same shape: memory, compute and, for every other
one, CPU all vary; after every 10th, one request of the 5 shapes, reported apart as
"between": the comparison taken in the same minutes), then ``5 shapes`` again. The p99
ratios of distinct to 5 shapes are printed, then the caps of the memory-bound structures
with their sizes.

    uv run python benchmarks/bench_shapes.py                    # both vendors, full run
    uv run python benchmarks/bench_shapes.py --vendor nvidia --nodes 200 --requests 3000

Prints figures; asserts nothing but the caps (a structure above its cap is a bug).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp

GPUS = 8
SHAPES = 5
#: In the distinct phase, one request of the 5 shapes after every this many distinct ones.
INTERLEAVE = 10
#: The vendors: (resource names of count, memory, compute; inventory plugin module).
VENDORS = {
    "mock": ("xpushare.io/mock-gpu", "xpushare.io/mock-gpumem", "xpushare.io/mock-gpucores"),
    "nvidia": ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"),
}


def _cluster(queue: Any, vendor: str, nodes: int) -> None:
    """Child process: the API server with the cluster (half of every node's GPUs in use)."""
    from xpushare.codec import encode_assignment, encode_inventory
    from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
    from xpushare.plugins.builtin.mock import parse_spec
    from xpushare.testing.apiserver import FakeApiServer, node, pod

    count = VENDORS[vendor][0]

    async def main() -> None:
        api = FakeApiServer(history=1_000_000)
        await api.start()
        for i in range(nodes):
            name = f"node-{i:05d}"
            devices = [
                d.model_copy(update={"vendor": vendor, "id": f"GPU-{name}-{d.index}"})
                for d in parse_spec(f"{GPUS}x A100-80GB", name)
            ]
            inventory = encode_inventory(vendor, name, devices)
            api.put("nodes", node(name, {f"xpushare.io/inventory-{vendor}": inventory}))
            for d in devices[: GPUS // 2]:
                piece = DeviceSlice(
                    device_id=d.id, index=d.index, memory_mib=40960, compute_percent=50
                )
                assignment = PodAssignment(
                    node=name,
                    containers=(
                        ContainerAssignment(container="main", vendor=vendor, devices=(piece,)),
                    ),
                )
                api.put(
                    "pods",
                    pod(
                        f"{name}-{d.index}",
                        node_name=name,
                        phase="Running",
                        limits={count: "1"},
                        annotations={"xpushare.io/assignment": encode_assignment(assignment)},
                    ),
                )
        queue.put(api.port)
        await asyncio.Event().wait()

    asyncio.run(main())


def rss_mib() -> float:
    """Resident memory of this process now (not the peak), in MiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99, ordered[-1]


def line(label: str, samples: list[float], rss: float) -> str:
    p50, p99, top = percentiles(samples)
    return (
        f"  {label:<34} n={len(samples):>6}  p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  "
        f"max {top:8.2f} ms  RSS {rss:6.1f} MiB"
    )


def shape_limits(vendor: str, i: int, *, distinct: bool) -> dict[str, str]:
    """The limits of request *i*: one of five shapes, or a shape no other request has."""
    count, memory, compute = VENDORS[vendor]
    if not distinct:
        return {count: "1", memory: str(4000 * (1 + i % SHAPES))}
    # Memory 1,024..40,023 MiB (each fits a half-used GPU), then the compute share moves on:
    # no two requests of a run of 100,000 (or up to 39,000 x 49) have the same shape.
    limits = {count: "1", memory: str(1024 + i % 39_000), compute: str(1 + i // 39_000)}
    if i % 2:
        limits["cpu"] = f"{100 + i % 60_000}m"  # a host request: answers kept per node
    return limits


async def run_vendor(args: argparse.Namespace) -> None:
    from xpushare.plugins import PluginHost
    from xpushare.plugins.builtin import CORE_PLUGINS, mock
    from xpushare.scheduler import Scheduler, load_config
    from xpushare.scheduler.kube import Kube, KubeSettings

    vendor = args.vendor
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_cluster, args=(queue, vendor, args.nodes), daemon=True)
    child.start()
    started = time.perf_counter()
    port = queue.get(timeout=1800)
    api_url = f"http://127.0.0.1:{port}"
    host = PluginHost(core_plugins=CORE_PLUGINS)
    if vendor == "mock":
        host.register("mock", mock)
    else:
        import xpushare_nvidia.plugin as nvidia_plugin  # the NVIDIA wheel: a fit hook of its own

        host.register("nvidia", nvidia_plugin)
    config = load_config(
        environ={},
        overrides={
            "server.host": "127.0.0.1",
            "server.port": 0,
            "server.metrics_port": 0,
            "leader.enabled": False,
        },
    )
    if args.memory_sites:
        import tracemalloc

        tracemalloc.start()
    kube = await Kube.connect(KubeSettings(server=api_url, request_timeout_s=300))
    scheduler = Scheduler(config, host=host, kube=kube)
    await scheduler.start()
    await scheduler.wait_synced(1800)
    gc.collect()
    after_sync = print_memory_sites(args.memory_sites) if args.memory_sites else None
    print(
        f"{vendor}: {args.nodes} nodes x {GPUS} GPUs, half used ({args.nodes * GPUS // 2} pods), "
        f"cluster and sync {time.perf_counter() - started:.0f} s; policy "
        f"{scheduler.placer.policy.name}; {args.candidates} candidate nodes per /filter",
        flush=True,
    )
    print(f"  {'after sync':<34} {'':>8}  RSS {rss_mib():6.1f} MiB", flush=True)
    base = f"http://127.0.0.1:{scheduler.ports['main']}"
    # The client in a process of its own, as kube-scheduler is: RSS is then the
    # scheduler's alone (the client's buffers and samples are not charged to it), and
    # the client's work does not share the scheduler's event loop.
    results = ctx.Queue()
    client = ctx.Process(
        target=_client,
        args=(results, base, vendor, args.nodes, args.candidates, args.warm, args.requests),
        daemon=True,
    )
    client.start()
    p99s: dict[str, float] = {}
    try:
        while True:
            message = await asyncio.to_thread(results.get, True, 3600)
            if message is None:
                break
            if isinstance(message, str):
                raise RuntimeError(f"the client failed: {message}")
            label, samples = message
            print(line(label, samples, rss_mib()), flush=True)
            p99s[label] = percentiles(samples)[1]
        distinct = p99s.get("distinct shapes")
        for reference in (f"{SHAPES} shapes", f"{SHAPES} shapes, between the distinct"):
            if distinct is not None and p99s.get(reference):
                print(
                    f"  /filter p99, distinct shapes / {reference}: "
                    f"{distinct / p99s[reference]:.2f}",
                    flush=True,
                )
        client.join(60)
        print_caps(scheduler)
        if after_sync is not None:
            print_memory_growth(after_sync, args.memory_sites)
    finally:
        client.kill()
        await scheduler.stop()
        await kube.close()
        child.kill()


def _client(
    results: Any, base: str, vendor: str, nodes: int, candidates: int, warm: int, requests: int
) -> None:
    """Child process: kube-scheduler's side. Sends each phase's requests (a /filter, then
    the /prioritize of the nodes that passed) and puts ``(label, server-side times)`` per
    phase and per tenth of the distinct phase, then ``None``; a failure as a string."""
    from xpushare.testing.apiserver import pod

    names = [f"node-{i:05d}" for i in range(nodes)]
    rng = random.Random(1)
    sequence = 0

    async def ask(http: aiohttp.ClientSession, i: int, distinct: bool) -> tuple[float, float]:
        """One pod's /filter, then the /prioritize of the nodes that passed (as
        kube-scheduler asks): each call's server-side time."""
        nonlocal sequence
        sequence += 1
        want = pod(f"p-{sequence}", limits=shape_limits(vendor, i, distinct=distinct))
        want["metadata"]["uid"] = f"uid-{sequence}"
        body = {"Pod": want, "Nodes": None, "NodeNames": rng.sample(names, candidates)}
        async with http.post(f"{base}/filter", json=body) as response:
            data = await response.json()
            if response.status != 200 or data.get("Error"):
                raise RuntimeError(f"/filter failed: {response.status} {data}")
            timing = response.headers["Server-Timing"]
        if not data["NodeNames"]:
            raise RuntimeError(f"no node fits request {i}: {data['FailedNodes']}")
        body["NodeNames"] = data["NodeNames"]
        async with http.post(f"{base}/prioritize", json=body) as response:
            if response.status != 200:
                raise RuntimeError(f"/prioritize failed: {await response.text()}")
            await response.read()
            score = float(response.headers["Server-Timing"].split("dur=")[1])
        return float(timing.split("dur=")[1]), score

    async def phase(http: aiohttp.ClientSession, label: str, n: int, distinct: bool) -> None:
        every = n // 10 if distinct else 0
        samples: list[float] = []
        scores: list[float] = []
        # In the distinct phase, after every INTERLEAVE-th request one of the 5 shapes: the
        # same comparison taken in the same minutes (a VM's speed drifts over a run).
        between: list[float] = []
        for i in range(n):
            took, score = await ask(http, i, distinct)
            samples.append(took)
            scores.append(score)
            if distinct and (i + 1) % INTERLEAVE == 0:
                between.append((await ask(http, i // INTERLEAVE, False))[0])
            if every and (i + 1) % every == 0 and i + 1 < n:
                results.put((f"{label}, {i + 1 - every + 1}..{i + 1}", samples[-every:]))
        results.put((label, samples))
        if every:
            results.put((f"{label}, last {every}", samples[-every:]))
        results.put((f"{label}: /prioritize", scores))
        if between:
            results.put((f"{SHAPES} shapes, between the distinct", between))

    async def main() -> None:
        async with aiohttp.ClientSession() as http:
            await phase(http, f"{SHAPES} shapes", warm, False)
            await phase(http, "distinct shapes", requests, True)
            await phase(http, f"{SHAPES} shapes again", warm, False)

    try:
        asyncio.run(main())
    except Exception as exc:  # reported to the parent, which stops
        results.put(f"{type(exc).__name__}: {exc}")
    else:
        results.put(None)


def print_memory_sites(top: int) -> Any:
    """Where the memory held after the sync was allocated (tracemalloc), by file and by line.

    Tracing costs time and memory of its own: the RSS figures of such a run are not the
    benchmark's; the split is what it is for. Returns the snapshot, to compare at the end.
    """
    import tracemalloc

    snapshot = tracemalloc.take_snapshot()
    total = sum(s.size for s in snapshot.statistics("filename"))
    print(f"  traced after sync: {total / 2**20:.1f} MiB", flush=True)
    for kind in ("filename", "lineno"):
        for stat in snapshot.statistics(kind)[:top]:
            frame = stat.traceback[0]
            where = frame.filename.split("site-packages/")[-1].split("/src/")[-1]
            suffix = f":{frame.lineno}" if kind == "lineno" else ""
            print(f"    {stat.size / 2**20:7.1f} MiB  {stat.count:>9,}  {where}{suffix}")
    return snapshot


def print_memory_growth(before: Any, top: int) -> None:
    """What the requests left allocated since the sync, by line: traced memory that grows
    is held by Python objects; RSS that grows while this does not is the allocator's."""
    import tracemalloc

    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    diff = after.compare_to(before, "lineno")
    grown = sum(d.size_diff for d in diff)
    print(f"  traced since the sync: {grown / 2**20:+.1f} MiB (RSS {rss_mib():.1f} MiB)")
    for d in diff[:top]:
        frame = d.traceback[0]
        where = frame.filename.split("site-packages/")[-1].split("/src/")[-1]
        print(f"    {d.size_diff / 2**20:+7.1f} MiB  {d.count_diff:>+9,}  {where}:{frame.lineno}")


def _cap(module: str, name: str) -> int | None:
    """A documented bound, or ``None`` in a build that has none (to measure one before)."""
    import importlib

    try:
        return int(getattr(importlib.import_module(module), name))
    except (ImportError, AttributeError):
        return None


def print_caps(scheduler: Any) -> None:
    """Each memory-bound structure's size against its cap; a size above its cap is a bug."""
    from xpushare.scheduling import signatures

    ledger = scheduler.ledger
    placer = scheduler.placer
    policy = placer.policy
    feasibility = scheduler.extender.feasibility
    nodes = list(ledger.nodes.values())
    memo_cap = getattr(ledger, "memo_limit", None)
    learnt = getattr(policy, "learnt", None)
    learnt_size = len(learnt) if learnt is not None else len(getattr(policy, "_seen", ()))
    rows: list[tuple[str, int, int | None]] = [
        ("node memo (largest)", max(len(n.memo) for n in nodes), memo_cap),
        ("node-state answers (largest)", max(len(n.shared) for n in nodes), memo_cap),
        (
            "placer memo keys",
            len(placer.cache.keys.keys),
            _cap("xpushare.placement.memo", "MAX_MEMO_KEYS"),
        ),
        (
            "policy request ids",
            len(getattr(policy, "_keys", ())),
            _cap("xpushare.scheduling.fragmentation", "MAX_REQUEST_IDS"),
        ),
        (
            "learnt shapes",
            learnt_size,
            _cap("xpushare.scheduling.workload", "MAX_LEARNT_SHAPES"),
        ),
        (
            "workload shapes",
            len(getattr(policy, "workload", ())),
            _cap("xpushare.scheduling.workload", "MAX_WORKLOAD_SHAPES"),
        ),
        (
            "feasibility ids",
            len(feasibility._ids),
            _cap("xpushare.scheduler.feasible", "IDS_LIMIT"),
        ),
        (
            "feasibility shared answers",
            len(feasibility._shared),
            _cap("xpushare.scheduler.feasible", "SHARED_LIMIT"),
        ),
        ("interned signatures", len(signatures._SIG_IDS), signatures.MAX_INTERNED_SIGNATURES),
    ]
    over = [name for name, size, cap in rows if cap is not None and size > cap]
    seen = f"{learnt.seen:,}" if learnt is not None else "?"
    print(
        "  caps: "
        + "; ".join(
            f"{name} {size:,}/{'none' if cap is None else f'{cap:,}'}" for name, size, cap in rows
        )
        + f"; pods learnt from {seen}; model refresh failures "
        f"{getattr(policy, 'model_errors', '?')}",
        flush=True,
    )
    if over:
        raise SystemExit(f"above their caps: {', '.join(over)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vendor", choices=["mock", "nvidia", "both"], default="both")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--candidates", type=int, default=500)
    parser.add_argument("--requests", type=int, default=100_000, help="distinct shapes")
    parser.add_argument("--warm", type=int, default=5_000, help="requests of the 5-shape phases")
    parser.add_argument(
        "--memory-sites",
        type=int,
        default=0,
        metavar="N",
        help="trace allocations (tracemalloc) and print the N largest sites after the sync",
    )
    args = parser.parse_args()
    args.candidates = min(args.candidates, args.nodes)
    if args.vendor == "both":
        print(
            f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.1f} at start",
            flush=True,
        )
        for vendor in ("mock", "nvidia"):
            # A fresh process per vendor: RSS of one run must not include the other's.
            command = [sys.executable, __file__, "--vendor", vendor]
            for option in ("nodes", "candidates", "requests", "warm", "memory_sites"):
                command += ["--" + option.replace("_", "-"), str(getattr(args, option))]
            subprocess.run(command, check=True)
        print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)
        return
    asyncio.run(run_vendor(args))


if __name__ == "__main__":
    main()

"""Pods per second through the real kube-scheduler, with and without our extender, in one run.

Why: the extender must never be kube-scheduler's bottleneck (issue 32's target: with it, at
least 0.75x kube-scheduler's throughput without it). Every other benchmark drives our
scheduler with a load generator of ours; here the real control plane of tools/kube (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler) drives it, with the chart installed
as tests/realcluster installs it. Two kube-schedulers run side by side on the same nodes:

* ``plain``: a profile of its own with no extender, which counts the pods' device count and
  memory as kube-scheduler counts any extended resource (the nodes advertise both), and
  whose pods skip our webhook;
* ``extender``: the chart's KubeSchedulerConfiguration, whose pods our webhook admits and
  our /filter, /prioritize and /bind place.

In both, a ``KubeletStandin`` plays each node's kubelet: its first status write of a pod bound
there (``status.startTime``, kubelet's sign that it admitted the pod), which every cluster
pays with or without xpushare, and which frees the node's handoff for our next bind there
(DESIGN.md §6; the node agents write nothing).

Both phases create the same pods, HAMi's (``nvidia.com/gpu: 1``, ``nvidia.com/gpumem:
8000``, or the mock vendor's names): kube-scheduler's own work per node grows with the
extended resources a pod names, so a plain pod asking fewer would flatter the baseline.

Each phase creates its pods from a few threads and times from the first create to the last
pod bound (watched). ``--rounds N`` runs the two phases N times, alternating, and reports each
round's ratio and their median: on shared cores the same phase costs a third more CPU in one
minute than in the next, so one pair of phases can say more of the machine than of the path.
Node objects only: no kubelet but the stand-in. Our scheduler's CPU (user+system) and RSS are
read from /proc around the extender phases, and every process's CPU around each phase: on
shared cores the rates follow the whole path's CPU per pod, so the table says where it goes
(the stand-in kubelets and the load generator read raw JSON to stay out of it).
``--profile`` samples our scheduler with py-spy; ``--profile-kube-scheduler`` and
``--profile-apiserver`` take Go CPU profiles of those. Prints figures; asserts nothing.

    scripts/kube-binaries                     # once
    uv run python benchmarks/bench_realcluster.py --nodes 1000 --pods 600 --rounds 3
    uv run python benchmarks/bench_realcluster.py --nodes 5000 --pods 2000 --vendor mock
    uv run python benchmarks/bench_realcluster.py --qps 1000 --profile /tmp/ours.txt  # py-spy
    uv run python benchmarks/bench_realcluster.py --profile-kube-scheduler /tmp/ks.pprof
    go tool pprof -top -cum /tmp/ks.pprof
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "deploy"))
sys.path.insert(0, str(REPO / "tests" / "realcluster"))

from realkit import Installed, install  # noqa: E402

from xpushare.codec import encode_inventory, inventory_key  # noqa: E402
from xpushare.models import Device  # noqa: E402
from xpushare.testing.realcluster import (  # noqa: E402
    ControlPlane,
    KubeletStandin,
    binaries_folder,
    create_ready_node,
    free_port,
    ready_node,
)
from xpushare.testing.realcluster.rawwatch import raw_watch  # noqa: E402

#: Resource names per vendor: (count, memory) as pods write them.
RESOURCES = {
    "nvidia": ("nvidia.com/gpu", "nvidia.com/gpumem"),
    "mock": ("xpushare.io/mock-gpu", "xpushare.io/mock-gpumem"),
}

#: Chart values per vendor: nvidia is the chart's default; mock as the chart's mock-only
#: scenario (tests/deploy/chartkit.py).
VALUES: dict[str, dict[str, Any]] = {
    "nvidia": {},
    "mock": {"vendors": {"nvidia": {"enabled": False}, "mock": {"enabled": True}}},
}

GPUS_PER_NODE = 8
SHARES = 10
A100_MIB = 81920
PLAIN = "plain-scheduler"
CREATE_THREADS = 8
#: Seconds of the extender phase a Go profile covers (the phase lasts longer at 1,000 pods).
GO_PROFILE_S = 20


def make_nodes(installed: Installed, vendor: str, count: int) -> float:
    count_name = RESOURCES[vendor][0]

    def one(index: int) -> None:
        name = f"node-{index:05d}"
        devices = [
            Device(
                vendor=vendor,
                id=f"GPU-{name}-{i}",
                index=i,
                model="NVIDIA A100-SXM4-80GB",
                memory_mib=A100_MIB,
                share_slots=SHARES,
            )
            for i in range(GPUS_PER_NODE)
        ]
        annotations = {inventory_key(vendor): encode_inventory(vendor, name, devices)}
        # The memory too: the plain phase's pods ask for it as kube-scheduler counts an
        # extended resource, the extender's as HAMi pods (our extender's to count).
        capacity = {
            count_name: str(GPUS_PER_NODE * SHARES),
            RESOURCES[vendor][1]: str(GPUS_PER_NODE * A100_MIB),
        }
        create_ready_node(installed.core, ready_node(name, annotations, capacity))

    started = time.monotonic()
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(one, range(count)))
    return time.monotonic() - started


def pod(name: str, limits: dict[str, str], scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]
    }
    labels = {}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
        labels["xpushare.io/webhook"] = "ignore"  # the chart's webhook objectSelector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


class BoundCounter:
    """Counts pods of a namespace as they get a node, from a watch."""

    def __init__(self, installed: Installed, namespace: str, wanted: int) -> None:
        self.installed = installed
        self.namespace = namespace
        self.wanted = wanted
        self.bound: set[str] = set()
        #: Pods per node: a burst packed onto few nodes meets the per-node handoff (DESIGN §6).
        self.nodes: Counter[str] = Counter()
        self.last = 0.0
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import functools

        lister = functools.partial(self.installed.core.list_namespaced_pod, self.namespace)
        raw_watch(lister, self._seen, self.done, timeout_s=5)

    def _seen(self, kind: str, obj: dict[str, Any], meta: dict[str, Any]) -> None:
        node = (obj.get("spec") or {}).get("nodeName")
        name = meta.get("name")
        if node and name and name not in self.bound:
            self.bound.add(name)
            self.nodes[node] += 1
            self.last = time.monotonic()
            if len(self.bound) >= self.wanted:
                self.done.set()


@dataclass
class Phase:
    #: Pods per second from the first create to the last bind.
    rate: float
    bound: int
    #: Nodes the pods went to, and the most pods on one of them.
    nodes: int
    most: int
    #: Seconds until the last create was answered (our webhook admits each in the extender
    #: phase): a phase whose creates take as long as its binds is limited by admission.
    created_s: float


def phase(
    installed: Installed, namespace: str, count: int, limits: dict[str, str], scheduler: str | None
) -> Phase:
    """One phase's pods created and watched until bound."""
    core = installed.core
    core.create_namespace({"metadata": {"name": namespace}})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        accounts = core.list_namespaced_service_account(namespace).items
        if any(a.metadata.name == "default" for a in accounts):
            break
        time.sleep(0.1)
    counter = BoundCounter(installed, namespace, count)
    started = time.monotonic()
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(
            pool.map(
                lambda i: core.create_namespaced_pod(
                    namespace, pod(f"p-{i:05d}", limits, scheduler), _preload_content=False
                ).read(),
                range(count),
            )
        )
    created_s = time.monotonic() - started
    counter.done.wait(max(120.0, count / 5))
    counter.done.set()
    elapsed = (counter.last or time.monotonic()) - started
    rate = len(counter.bound) / elapsed if elapsed > 0 else 0.0
    most = max(counter.nodes.values(), default=0)
    return Phase(rate, len(counter.bound), len(counter.nodes), most, created_s)


#: Server-side timers of our scheduler read around the extender phase: (metric, label).
TIMERS = {
    "filter": ("xpushare_scheduler_request_duration_seconds", "filter"),
    "prioritize": ("xpushare_scheduler_request_duration_seconds", "prioritize"),
    "bind": ("xpushare_scheduler_request_duration_seconds", "bind"),
    "webhook": ("xpushare_scheduler_request_duration_seconds", "webhook"),
    "bind waiting for a handoff": ("xpushare_scheduler_handoff_wait_seconds", ""),
    # How late the event loop ran a timer due every 20 ms: a request waits about this long
    # before its handler starts (time the handlers' own timers do not see).
    "event loop lag": ("xpushare_scheduler_loop_lag_seconds", ""),
}


def timers(installed: Installed) -> dict[str, tuple[float, float]]:
    """(seconds, count) of each of TIMERS so far."""
    found: dict[str, tuple[float, float]] = {}
    for key, (metric, verb) in TIMERS.items():
        labels = {"verb": verb} if verb else {}
        found[key] = (
            installed.metric(f"{metric}_sum", **labels),
            installed.metric(f"{metric}_count", **labels),
        )
    return found


def cpu_seconds(pid: int) -> float:
    """CPU (user + system) of *pid* and of its live children (the filter workers)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if stat.parent.name == str(pid) or fields[1] == str(pid):  # itself, or ppid
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def cpu_by_process(plane: ControlPlane) -> dict[str, float]:
    """CPU seconds so far of every control-plane component, and of this process (the load
    generator, the bound counter and the stand-in kubelets)."""
    found = {c.name: cpu_seconds(c.process.pid) for c in plane.components}
    found["bench (load, watch, stand-in kubelets)"] = sum(os.times()[:2])
    return found


class GoProfile:
    """A Go CPU profile of a component of the next *seconds* (pprof at *base*, a client
    certificate where it wants one), taken in a thread; :meth:`wait` writes it to *path*."""

    def __init__(
        self, base: str, path: str, seconds: int, cert: tuple[Path, Path] | None = None
    ) -> None:
        self.url = f"{base}/debug/pprof/profile?seconds={seconds}"
        self.path = path
        self.seconds = seconds
        self.cert = cert
        self._thread = threading.Thread(target=self._take, daemon=True)
        self._thread.start()

    def _take(self) -> None:
        import ssl
        import urllib.request

        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # a profile, read once: the server is ours
        if self.cert is not None:
            context.load_cert_chain(*map(str, self.cert))
        with urllib.request.urlopen(self.url, context=context, timeout=self.seconds + 60) as answer:
            Path(self.path).write_bytes(answer.read())

    def wait(self) -> None:
        self._thread.join(self.seconds + 60)


def api_requests(plane: ControlPlane) -> Counter[str]:
    """kube-apiserver's counts so far: requests by verb and resource
    (``apiserver_request_total``), and the watch events it sent and their bytes by resource
    (``apiserver_watch_events_total``, ``apiserver_watch_events_sizes_sum``; keys
    ``watch events RESOURCE`` and ``watch bytes RESOURCE``): every watcher of a resource gets
    each of its changes, so a write to an object many components watch costs more than its
    request.
    Read with a regular expression: its /metrics is megabytes, too slow for the parser."""
    import re
    import ssl
    import urllib.request

    assert plane.pki is not None
    context = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
    context.load_cert_chain(*map(str, plane.admin_cert))
    with urllib.request.urlopen(f"{plane.url}/metrics", context=context) as answer:
        text = answer.read().decode()
    found: Counter[str] = Counter()
    families = {
        "apiserver_request_total{": "",
        "apiserver_watch_events_total{": "watch events",
        "apiserver_watch_events_sizes_sum{": "watch bytes",
    }
    for line in text.splitlines():
        prefix = next((p for p in families if line.startswith(p)), None)
        if prefix is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if families[prefix]:
            key = f"{families[prefix]} {labels.get('resource', '?')}"
        else:
            key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
            if labels.get("subresource"):
                key += f"/{labels['subresource']}"
        found[key] += int(float(line.rsplit(" ", 1)[1]))
    return found


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Measured:
    """One phase of one round: its pods, and what every process spent on them."""

    which: str
    phase: Phase
    #: CPU seconds per process during the phase.
    cpu: dict[str, float]
    #: kube-apiserver's requests during the phase, by verb and resource.
    requests: Counter[str]
    #: Our scheduler's CPU seconds during the phase (with its workers; 0 in a plain one).
    ours: float = 0.0

    def per_pod_ms(self, seconds: float) -> float:
        return 1000 * seconds / self.phase.bound if self.phase.bound else 0.0


@dataclass
class Probes:
    """What the first extender phase samples: py-spy of ours, Go profiles of theirs."""

    profile: str | None
    kube_scheduler: tuple[str, str] | None  # (pprof base URL, file)
    apiserver: str | None


def run_plain(
    installed: Installed, plane: ControlPlane, namespace: str, pods: int, limits: dict[str, str]
) -> Measured:
    cpu_before, requests_before = cpu_by_process(plane), api_requests(plane)
    with KubeletStandin(installed.core):
        result = phase(installed, namespace, pods, limits, PLAIN)
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_by_process(plane).items()}
    return Measured("plain", result, cpu, api_requests(plane) - requests_before)


def run_extender(
    installed: Installed,
    plane: ControlPlane,
    namespace: str,
    pods: int,
    limits: dict[str, str],
    probes: Probes | None,
) -> Measured:
    pid = plane.component("xpushare-scheduler").process.pid
    requests_before = api_requests(plane)
    sampler = None
    go_profiles = []
    if probes is not None and probes.profile:
        sampler = subprocess.Popen(
            [
                *("py-spy", "record", "--pid", str(pid), "--format", "raw"),
                *("--output", probes.profile, "--rate", "200", "--nonblocking"),
            ]
        )
        time.sleep(1)  # attached before the first pod
    # Read after the timers and the metrics: each read makes our scheduler render /metrics,
    # CPU that is not the phase's.
    ours_before, cpu_before = cpu_seconds(pid), cpu_by_process(plane)
    if probes is not None and probes.kube_scheduler:
        go_profiles.append(GoProfile(*probes.kube_scheduler, GO_PROFILE_S))
    if probes is not None and probes.apiserver:
        go_profiles.append(GoProfile(plane.url, probes.apiserver, GO_PROFILE_S, plane.admin_cert))
    with KubeletStandin(installed.core):
        result = phase(installed, namespace, pods, limits, None)
    ours = cpu_seconds(pid) - ours_before
    for go_profile in go_profiles:
        go_profile.wait()
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_by_process(plane).items()}
    if sampler is not None:
        sampler.send_signal(signal.SIGINT)  # py-spy writes its file and exits
        sampler.wait(60)
    return Measured("extender", result, cpu, api_requests(plane) - requests_before, ours)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if not ordered:
        return 0.0
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def print_row(round_: int, m: Measured, ratio: float | None) -> None:
    p = m.phase
    total = m.per_pod_ms(sum(m.cpu.values()))
    tail = f" {ratio:>6.2f}" if ratio is not None else ""
    print(
        f"{round_:>5} {m.which:<9} {p.bound:>6} {p.rate:>7.1f} {p.created_s:>8.1f} s "
        f"{p.nodes:>6} {p.most:>5} {total:>9.1f} ms{tail}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=1000, help="pods per phase")
    parser.add_argument("--vendor", choices=sorted(RESOURCES), default="nvidia")
    parser.add_argument("--order", choices=("plain-first", "extender-first"), default="plain-first")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run both phases this many times, alternating, each in namespaces of its own, and "
        "report every round's ratio and their median: shared cores change speed by a third "
        "from one minute to the next, and the rounds see the same machine in turn",
    )
    parser.add_argument(
        "--qps",
        type=int,
        help="kube-scheduler's client rate limit in both schedulers (default: theirs, 50/s)",
    )
    parser.add_argument(
        "--filter-workers",
        type=int,
        default=0,
        help="the chart's scheduler.filterWorkers (its advice past ~1,000 nodes: 1)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of our scheduler, as `xpushare scheduler --set` takes it (repeatable)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="sample our scheduler with py-spy (installed separately: pip install py-spy) "
        "during the first extender phase and write its collapsed stacks to FILE",
    )
    parser.add_argument(
        "--profile-kube-scheduler",
        metavar="FILE",
        help=f"take a Go CPU profile of the chart's kube-scheduler over the first {GO_PROFILE_S} s "
        "of the extender phase of --profile-round and write it to FILE (read it with "
        "`go tool pprof -top FILE`)",
    )
    parser.add_argument(
        "--profile-apiserver",
        metavar="FILE",
        help="the same of kube-apiserver",
    )
    parser.add_argument(
        "--profile-round",
        type=int,
        default=1,
        metavar="N",
        help="the round whose extender phase the profiles cover (default 1; later rounds find "
        "the cluster fuller and spread their pods over more nodes)",
    )
    args = parser.parse_args()
    if args.rounds < 1 or args.pods < 1 or args.nodes < 1:
        parser.error("--rounds, --pods and --nodes must be at least 1")
    if not 1 <= args.profile_round <= args.rounds:
        parser.error(f"--profile-round must be between 1 and --rounds ({args.rounds})")
    # Each node takes GPUS_PER_NODE x SHARES of these pods; leave a node's worth spare.
    if 2 * args.rounds * args.pods > (args.nodes - 1) * GPUS_PER_NODE * SHARES:
        parser.error(
            f"{args.rounds} rounds of {args.pods} pods a phase do not fit on {args.nodes} nodes "
            f"of {GPUS_PER_NODE * SHARES} slots: fewer pods or rounds, or more nodes"
        )

    with (
        tempfile.TemporaryDirectory(prefix="bench-realcluster-") as work,
        ControlPlane(binaries_folder(REPO), Path(work)) as plane,
    ):
        settings = dict(item.split("=", 1) for item in args.set)
        pprof_port = free_port() if args.profile_kube_scheduler else None
        installed = install(
            plane,
            VALUES[args.vendor],
            client_qps=args.qps,
            filter_workers=args.filter_workers,
            settings=settings or None,
            kube_scheduler_pprof_port=pprof_port,
        )
        plain_config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": PLAIN}],
            "percentageOfNodesToScore": 100,
        }
        if args.qps is not None:
            plain_config["clientConnection"] = {"qps": args.qps, "burst": 2 * args.qps}
        plane.start_scheduler(plain_config, name="kube-scheduler-plain")
        made = make_nodes(installed, args.vendor, args.nodes)
        print(
            f"{args.nodes} nodes made in {made:.1f} s (control plane up in {plane.started_s:.1f} s)"
        )
        print(
            f"vendor {args.vendor}, {args.nodes} nodes x {GPUS_PER_NODE} GPUs, {args.pods} pods "
            f"per phase, {args.rounds} round(s), order {args.order}, kube-scheduler client qps "
            f"{args.qps or 'default (50)'}, filter workers {args.filter_workers}, settings "
            f"{args.set or 'none'}"
        )
        time.sleep(2)  # both schedulers' caches hold every node

        count_name, memory_name = RESOURCES[args.vendor]
        # The same pods in both phases (HAMi's shape): kube-scheduler's own per-node work
        # grows with the extended resources a pod names (noderesources.Fit checks each name
        # with a regular expression, 22 % of its CPU in a profile of 2026-12-06).
        limits = {count_name: "1", memory_name: "8000"}
        pid = installed.plane.component("xpushare-scheduler").process.pid
        order = ["plain", "extender"]
        if args.order == "extender-first":
            order.reverse()
        probes: Probes | None = Probes(
            args.profile,
            (f"https://127.0.0.1:{pprof_port}", args.profile_kube_scheduler)
            if args.profile_kube_scheduler
            else None,
            args.profile_apiserver,
        )
        timers_before = timers(installed)
        rss_before = rss_mib(pid)
        # "all": every process's CPU per pod in the phase, the machine's speed as much as
        # the path's (the same plain phase costs a third more CPU in a slow minute).
        print(
            f"{'round':>5} {'phase':<9} {'bound':>6} {'pods/s':>7} {'created in':>10} "
            f"{'nodes':>6} {'most':>5} {'all CPU/pod':>12} {'ratio':>6}",
            flush=True,
        )
        rounds: list[dict[str, Measured]] = []
        for round_ in range(1, args.rounds + 1):
            measured: dict[str, Measured] = {}
            for which in order:
                namespace = f"bench-{which}-{round_}"
                if which == "plain":
                    measured[which] = run_plain(installed, plane, namespace, args.pods, limits)
                else:
                    measured[which] = run_extender(
                        installed,
                        plane,
                        namespace,
                        args.pods,
                        limits,
                        probes if round_ == args.profile_round else None,
                    )
                ratio = None
                if len(measured) == 2 and measured["plain"].phase.rate:
                    ratio = measured["extender"].phase.rate / measured["plain"].phase.rate
                print_row(round_, measured[which], ratio)
            rounds.append(measured)
        spent = {
            key: (total - timers_before[key][0], n - timers_before[key][1])
            for key, (total, n) in timers(installed).items()
        }
        rss_after = rss_mib(pid)
        closed = {
            f"{labels['listener']} {labels['reason']}": int(value)
            for labels, value in installed.samples("xpushare_scheduler_connections_closed_total")
            if value
        }
        failed = {
            f"{labels['verb']} {labels['reason']}": int(value)
            for labels, value in installed.samples("xpushare_scheduler_failures_total")
            if value and labels.get("verb") == "bind"
        }

    report(rounds, spent, (rss_before, rss_after), closed, failed)


def report(
    rounds: list[dict[str, Measured]],
    spent: dict[str, tuple[float, float]],
    rss: tuple[float, float],
    closed: dict[str, int],
    failed: dict[str, int],
) -> None:
    """The rounds' ratios, then where the CPU went over all rounds together."""
    ratios = [
        r["extender"].phase.rate / r["plain"].phase.rate for r in rounds if r["plain"].phase.rate
    ]
    if len(ratios) == 1:
        print(f"extender / plain: {ratios[0]:.2f} (target >= 0.75)")
    else:
        print(
            f"extender / plain: median {median(ratios):.2f} of {len(ratios)} rounds "
            f"(lowest {min(ratios):.2f}, highest {max(ratios):.2f}; target >= 0.75)"
        )

    def together(which: str) -> tuple[int, dict[str, float], Counter[str], float]:
        pods, cpu, requests, ours = 0, Counter[str](), Counter[str](), 0.0
        for r in rounds:
            m = r[which]
            pods += m.phase.bound
            cpu.update(m.cpu)
            requests.update(m.requests)
            ours += m.ours
        return pods, dict(cpu), requests, ours

    plain_pods, plain_cpu, plain_requests, _ = together("plain")
    ext_pods, ext_cpu, ext_requests, ours = together("extender")
    per_pod_ms = 1000 * ours / ext_pods if ext_pods else 0.0
    print(
        f"xpushare scheduler (with its workers): {per_pod_ms:.2f} ms CPU per pod, "
        f"RSS {rss[0]:.0f} -> {rss[1]:.0f} MiB; server-side time over the extender phases:"
    )
    for key in sorted(spent):
        total, n = spent[key]
        if n:
            print(f"  {key:<28} {int(n):>6} calls {1000 * total / n:>8.2f} ms mean")
    print(f"CPU per pod bound, by process, all rounds: {'':<7} {'plain':>8} {'extender':>9}")
    for name in ext_cpu:
        cells = [
            1000 * cpu.get(name, 0.0) / pods if pods else 0.0
            for cpu, pods in ((plain_cpu, plain_pods), (ext_cpu, ext_pods))
        ]
        print(f"  {name:<46} {cells[0]:>6.2f} ms {cells[1]:>6.2f} ms")
    print(f"kube-apiserver requests per pod bound, by verb and resource: {'':<8} plain  extender")
    keys = sorted({*plain_requests, *ext_requests})
    for key in (k for k in keys if not k.startswith("watch ")):
        cells = [
            requests[key] / pods if pods else 0.0
            for requests, pods in ((plain_requests, plain_pods), (ext_requests, ext_pods))
        ]
        if max(cells) >= 0.05:
            print(f"  {key:<56} {cells[0]:>5.2f} {cells[1]:>9.2f}")
    print("kube-apiserver watch events sent per pod bound, by resource (KiB):   plain  extender")
    for key in (k for k in keys if k.startswith("watch events ")):
        resource = key.removeprefix("watch events ")
        cells = []
        for requests, pods in ((plain_requests, plain_pods), (ext_requests, ext_pods)):
            events = requests[key] / pods if pods else 0.0
            kib = requests[f"watch bytes {resource}"] / 1024 / pods if pods else 0.0
            cells.append(f"{events:.1f} ({kib:.1f})")
        if any(not c.startswith("0.0 ") for c in cells):
            print(f"  {resource:<48} {cells[0]:>13} {cells[1]:>13}")
    if closed:
        # Each connection closed is a TLS handshake again for kube-scheduler or the API server.
        print(
            "connections our scheduler closed, by listener and reason: "
            + ", ".join(f"{reason} {n}" for reason, n in sorted(closed.items()))
        )
    if failed:
        # Each failed bind is a pod kube-scheduler places again: a cost, and a smell.
        print(
            "failed binds (kube-scheduler retried them): "
            + ", ".join(f"{reason} {n}" for reason, n in sorted(failed.items()))
        )


if __name__ == "__main__":
    main()

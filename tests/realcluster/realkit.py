"""What the real-cluster tests share: the installed system's handle, our test nodes and pods,
and waits on the API server (conftest.py holds the fixtures that start it all)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import yaml
from chartkit import RELEASE, config_file, one, render, strip

from xpushare.codec import ASSIGNMENT_KEY, decode_assignment, encode_inventory, inventory_key
from xpushare.models import Device
from xpushare.testing.realcluster import (
    ControlPlane,
    CutProxy,
    ReadyProxy,
    create_ready_node,
    extender_config,
    free_port,
    ready_node,
    start_xpushare_scheduler,
    webhook_config,
)

#: The chart's namespace, and the namespace the tests' pods live in (the chart's webhook skips
#: its own namespace and kube-system).
SYSTEM_NAMESPACE = "xpushare-system"
PODS_NAMESPACE = "ml"

#: The chart's values for the suite: its defaults, plus what they leave out that a real API
#: server should see too: the optional ValidatingAdmissionPolicy that narrows the node
#: agent's "patch nodes" to its own node, and nodes of both modes (perNodeMode), which
#: renders the DRA objects beside the device-plugin ones (DeviceClasses, the scheduler's
#: dra.enabled and its RBAC on claims and slices, the second extender entry).
CHART_VALUES = {
    "nodeAgent": {"nodeScopedPolicy": {"enabled": True}, "perNodeMode": {"enabled": True}}
}

#: The chart's DNS name of the scheduler's Service: its serving certificate carries it, and
#: the chart's extender config names it as ``tlsConfig.serverName``.
SCHEDULER_SERVICE = f"{RELEASE}-xpushare-scheduler.{SYSTEM_NAMESPACE}.svc"


@dataclass
class Installed:
    """The control plane with xpushare on it: our scheduler process (its webhook registered
    with the API server, its extender in kube-scheduler), as the chart configures both."""

    plane: ControlPlane
    core: Any
    scheduler_url: str
    chart: list[dict[str, Any]]
    #: Each replica's own URL (``scheduler_url`` is the ready one's, through a proxy when
    #: there are several).
    replica_urls: list[str]
    #: Between our scheduler and kube-apiserver, where the install asked for one
    #: (``install(..., api_proxy=True)``): cut it to partition our scheduler alone.
    api_proxy: CutProxy | None = None

    def samples(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        """The samples of a metric of our scheduler's /metrics whose labels include
        *labels*: (labels, value) pairs."""
        import ssl
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        assert self.plane.pki is not None
        context = ssl.create_default_context(cafile=str(self.plane.pki.ca_cert))
        with urllib.request.urlopen(f"{self.scheduler_url}/metrics", context=context) as answer:
            text = answer.read().decode()
        return [
            (sample.labels, sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        ]

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include *labels*."""
        return sum(value for _, value in self.samples(name, **labels))


#: Bound of waits that end within a second or two on working code (kube-scheduler's next
#: cycle, our /bind): only there so a broken flow fails instead of hanging.
FLOW_WAIT_S = 60.0

#: An A100 80GB's memory as NVML reports it.
A100_MIB = 81920

#: The label that groups a test's nodes: each test's pods select their own group, so tests
#: sharing the cluster never place on each other's nodes.
GROUP_LABEL = "test.xpushare.io/group"


def nvidia_node(
    installed: Installed,
    name: str,
    group: str,
    gpus: int = 4,
    *,
    model: str = "NVIDIA A100-SXM4-80GB",
    memory_mib: int = A100_MIB,
) -> dict[str, Any]:
    """A Ready node of *group* whose NVIDIA inventory our node agent would publish: *gpus*
    GPUs (A100s unless told), ten shares each, and ``nvidia.com/gpu`` in its allocatable as
    the device plugin registers it."""
    devices = [
        Device(
            vendor="nvidia",
            id=f"GPU-{name}-{index}",
            index=index,
            model=model,
            memory_mib=memory_mib,
            share_slots=10,
        )
        for index in range(gpus)
    ]
    annotations = {inventory_key("nvidia"): encode_inventory("nvidia", name, devices)}
    capacity = {"nvidia.com/gpu": str(gpus * 10)}
    node = ready_node(name, annotations, capacity, labels={GROUP_LABEL: group})
    stored: dict[str, Any] = installed.core.api_client.sanitize_for_serialization(
        create_ready_node(installed.core, node)
    )
    return stored


def hami_pod(name: str, group: str, **limits: str) -> dict[str, Any]:
    """A pod written for HAMi: *limits* such as ``nvidia.com/gpu`` and ``nvidia.com/gpumem``,
    no schedulerName (our webhook sets it), placed only on the nodes of *group*."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": PODS_NAMESPACE},
        "spec": {
            "nodeSelector": {GROUP_LABEL: group},
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": dict(limits)}}
            ],
        },
    }


def assigned(pod: dict[str, Any]) -> bool:
    """Whether *pod* is bound with our assignment (the Binding writes both in one update)."""
    annotations = pod["metadata"].get("annotations") or {}
    return bool(pod["spec"].get("nodeName")) and ASSIGNMENT_KEY in annotations


def recount(pods: list[dict[str, Any]]) -> tuple[Counter[str], Counter[str]]:
    """Memory (MiB) and share slots booked per device id by *pods*' assignments, as the API
    server holds them: the usage a new scheduler replica would rebuild."""
    memory: Counter[str] = Counter()
    shares: Counter[str] = Counter()
    for pod in pods:
        raw = (pod["metadata"].get("annotations") or {}).get(ASSIGNMENT_KEY)
        if raw is None:
            continue
        for container in decode_assignment(raw).containers:
            for device in container.devices:
                memory[device.device_id] += device.memory_mib
                shares[device.device_id] += 1
    return memory, shares


def ledger_memory(installed: Installed, node: str) -> dict[str, int]:
    """Memory (MiB) per device id of *node* that our scheduler's ledger holds booked, from
    its /metrics (devices with nothing booked left out)."""
    found = installed.samples("xpushare_scheduler_device_memory_allocated_mib", node=node)
    return {labels["device"]: int(value) for labels, value in found if value}


def eventually(check: Any, timeout_s: float = 15.0) -> bool:
    """Whether *check()* turns true within *timeout_s* (a bound for what settles within a
    second on working code: a watch delivering, a ledger snapshot refreshing)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def wait_pod(
    installed: Installed, name: str, done: Any, what: str, *, deadline: float | None = None
) -> dict[str, Any]:
    """The pod once ``done(pod)`` holds, read from the API server; fails after FLOW_WAIT_S (or
    at the ``time.monotonic()`` *deadline*) with the pod and both schedulers' logs."""
    api = installed.core.api_client
    if deadline is None:
        deadline = time.monotonic() + FLOW_WAIT_S
    current: dict[str, Any] = {}
    while time.monotonic() < deadline:
        current = api.sanitize_for_serialization(
            installed.core.read_namespaced_pod(name, PODS_NAMESPACE)
        )
        if done(current):
            return current
        time.sleep(0.1)
    tail = installed.plane.component("kube-scheduler").log_tail()
    ours = installed.plane.component("xpushare-scheduler").log_tail()
    raise AssertionError(
        f"pod {PODS_NAMESPACE}/{name} not {what} in time: {current}\n"
        f"--- kube-scheduler\n{tail}\n--- xpushare scheduler\n{ours}"
    )


#: Bound of waits for controllers that act within a second on a working cluster (the
#: ServiceAccount controller making ``default``): only there so a broken start fails.
CONTROLLER_WAIT_S = 60.0


def _wait_for(what: str, check: Any, timeout_s: float = CONTROLLER_WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not within {timeout_s} s")


def install(
    plane: ControlPlane,
    values: dict[str, Any] | None = None,
    *,
    client_qps: int | None = None,
    replicas: int = 1,
    settings: dict[str, str] | None = None,
    api_proxy: bool = False,
    filter_workers: int = 0,
    kube_scheduler_pprof_port: int | None = None,
) -> Installed:
    """Install xpushare on *plane* as the chart renders it with *values* (default
    :data:`CHART_VALUES`): every object it renders created for real, our scheduler as a
    process on its ServiceAccount's token, the chart's webhook registered with the API server
    and its KubeSchedulerConfiguration run by kube-scheduler, pointed at that process.
    *client_qps* overrides kube-scheduler's client rate limit (its default: 50/s, burst 100).
    With *replicas* > 1 the others wait for the Lease, and a :class:`ReadyProxy` stands for
    the chart's Service in front of them (new connections go to the ready one, the leader).
    *settings* are passed to every replica (``--set``). With *api_proxy* our scheduler reaches
    kube-apiserver through a :class:`CutProxy` (``Installed.api_proxy``). With
    *filter_workers* the chart's ``scheduler.filterWorkers`` is set (one replica only):
    kube-scheduler calls the workers' port for /filter and /prioritize. With
    *kube_scheduler_pprof_port* kube-scheduler serves Go's profiles there (anyone may read)."""
    from kubernetes.client.rest import ApiException

    pki = plane.pki
    assert pki is not None
    core = plane.core()
    for namespace in (SYSTEM_NAMESPACE, PODS_NAMESPACE):
        core.create_namespace({"metadata": {"name": namespace}})

    def default_account() -> bool:
        try:
            core.read_namespaced_service_account("default", PODS_NAMESPACE)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # The ServiceAccount admission plugin refuses pods until the controller made `default`.
    _wait_for("the ServiceAccount controller making ml/default", default_account)

    # Everything the chart renders, created for real (server-side validation of RBAC, the
    # webhook configuration, the PDB, ...), except its webhook registration: that calls the
    # in-cluster Service, which has no endpoints here; the same object pointed at our local
    # scheduler is registered below.
    values = dict(CHART_VALUES if values is None else values)
    filter_port = 0
    if filter_workers:
        assert replicas == 1, "filter workers are wired for one replica here"
        scheduler_values = {**values.get("scheduler", {}), "filterWorkers": filter_workers}
        values["scheduler"] = scheduler_values
        filter_port = free_port()
        settings = {**(settings or {}), "server.filter_port": str(filter_port)}
    chart = render(values)
    plane.apply([o for o in chart if o["kind"] != "MutatingWebhookConfiguration"])
    # Our scheduler and kube-scheduler run as their ServiceAccounts, under the chart's RBAC
    # alone: any call it does not grant is a 403 that fails the suite.
    proxy = None
    if api_proxy:
        proxy = CutProxy(int(plane.url.rsplit(":", 1)[1]))
        plane.on_stop(proxy.close)
    scheduler_kubeconfig = plane.token_kubeconfig(
        SYSTEM_NAMESPACE,
        f"{RELEASE}-xpushare-scheduler",
        server=proxy.url if proxy is not None else None,
    )
    kube_scheduler_kubeconfig = plane.token_kubeconfig(
        SYSTEM_NAMESPACE, f"{RELEASE}-xpushare-kube-scheduler"
    )

    scheduler_yaml = plane.work / "xpushare-scheduler.yaml"
    scheduler_yaml.write_text(yaml.safe_dump(config_file(chart, "scheduler.yaml")))
    serving = pki.issue(
        "xpushare-scheduler",
        common_name=SCHEDULER_SERVICE,
        hosts=("127.0.0.1", SCHEDULER_SERVICE),
    )
    urls = []
    for index in range(replicas):
        _, url = start_xpushare_scheduler(
            plane,
            scheduler_yaml,
            kubeconfig=scheduler_kubeconfig,
            serving=serving,
            settings={"leader.identity": f"replica-{index}", **(settings or {})},
            name="xpushare-scheduler" if index == 0 else f"xpushare-scheduler-{index}",
            standby=index > 0,
        )
        urls.append(url)
    url = urls[0]
    if replicas > 1:
        ready = ReadyProxy(urls, pki.ca_cert)
        plane.on_stop(ready.close)
        url = ready.url

    from kubernetes import client

    admission = client.AdmissionregistrationV1Api(plane.api_client())
    webhook = one(chart, "MutatingWebhookConfiguration")
    path = webhook["webhooks"][0]["clientConfig"]["service"]["path"]
    admission.create_mutating_webhook_configuration(
        webhook_config(strip(webhook), f"{url}{path}", pki.ca_cert.read_bytes())
    )
    rendered = config_file(chart, "kube-scheduler.yaml")
    config = extender_config(
        rendered,
        url,
        pki.ca_cert,
        filter_url=f"https://127.0.0.1:{filter_port}" if filter_port else None,
    )
    if client_qps is not None:
        config["clientConnection"] = {"qps": client_qps, "burst": 2 * client_qps}
    kube_scheduler = plane.start_scheduler(
        config, kubeconfig=kube_scheduler_kubeconfig, pprof_port=kube_scheduler_pprof_port
    )
    # Up once it serves nothing yet: its readiness is its Lease, which the tests see as pods
    # being scheduled; here only an early exit (a refused config) is caught.
    time.sleep(0.5)
    if not kube_scheduler.alive():
        raise RuntimeError(f"kube-scheduler exited:\n{kube_scheduler.log_tail()}")
    return Installed(plane, core, url, chart, urls, proxy)


#: The node agent's ServiceAccount, as the chart names it.
AGENT_ACCOUNT = f"{RELEASE}-xpushare-node"


def agent_kubeconfig(installed: Installed, node: str) -> Any:
    """A kubeconfig for the node agent of *node*: a token of the chart's node-agent
    ServiceAccount bound to a pod of that node, as kubelet mounts it in the DaemonSet's pod
    (the chart's node-scoped policy checks the node named in the token). The pod stands for
    the DaemonSet's; where a real kubelet runs on the node, it "runs" it on the fake runtime.
    """
    pod = installed.core.create_namespaced_pod(
        SYSTEM_NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"agent-{node}", "namespace": SYSTEM_NAMESPACE},
            "spec": {
                "nodeName": node,
                "serviceAccountName": AGENT_ACCOUNT,
                # The token is made below; kubelet need not project one.
                "automountServiceAccountToken": False,
                "containers": [{"name": "agent", "image": "xpushare"}],
            },
        },
    )
    return installed.plane.token_kubeconfig(
        SYSTEM_NAMESPACE, AGENT_ACCOUNT, pod=(pod.metadata.name, pod.metadata.uid)
    )


def gone(installed: Installed, name: str, namespace: str = PODS_NAMESPACE) -> bool:
    """Whether the pod is no longer in the API server (kubelet confirmed its end)."""
    from kubernetes.client.exceptions import ApiException

    try:
        installed.core.read_namespaced_pod(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False

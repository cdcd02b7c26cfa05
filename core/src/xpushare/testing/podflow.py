"""One node of a cluster in a test: a pod from the admission webhook to kubelet's Allocate.

Why: a vendor plugin is only done when a pod asking for its devices goes through the whole
system, and every such test needs the same rig: a fake API server, the real scheduler
(webhook, extender ``/filter`` and ``/bind`` over HTTP, the real ``kubernetes`` client), the
real node agent publishing what the plugin detected and serving a fake kubelet over the
device-plugin gRPC API, all started in the right order, waited on until each has seen the
others, and stopped in the reverse order. :class:`PodFlow` is that rig, written once, so each
test is only its pods and its assertions::

    from xpushare.testing.apiserver import pod
    from xpushare.testing.podflow import PodFlow

    async with PodFlow(node_host, scheduler_host, vendor="acme") as flow:
        bound = await flow.schedule(pod("infer", limits={"acme.com/npu": "1"}))
        allocated = await flow.allocate(bound)
        assert allocated["main"].envs["ACME_VISIBLE_DEVICES"] == "0"
        await flow.delete(bound)

Nothing is written by hand: the agent publishes the inventory the scheduler places by, /bind
writes the assignment and the handoff, Allocate reads them. Every request the components
made is recorded by the API server (``flow.api.writes("pods")``).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import aiohttp

from xpushare.codec import HANDOFF_KEY, decode_handoff, inventory_key
from xpushare.node import KubeClient
from xpushare.scheduler import Scheduler, load_config
from xpushare.scheduler.kube import Kube, KubeSettings
from xpushare.testing.apiserver import FakeApiServer, json_patch, node
from xpushare.testing.handoffs import handoff_annotations
from xpushare.testing.kubelet import AdmissionError, ContainerResult, ContainerSpec, FakeKubelet
from xpushare.testing.nodeagent import RunningAgent, run_node_agent, short_socket_dir

if TYPE_CHECKING:
    from pathlib import Path

    from xpushare.plugins import PluginHost

__all__ = ["PodFlow"]

Object = dict[str, Any]

#: The scheduler's settings in a test: loopback, free ports, one replica (no leader election),
#: and /bind waiting at most 3 s for the node's handoff (its production default is longer; a
#: test's pod is admitted, which frees the handoff, within milliseconds of Allocate).
SCHEDULER_SETTINGS: Mapping[str, Any] = {
    "server.host": "127.0.0.1",
    "server.port": 0,
    "server.metrics_port": 0,
    "leader.enabled": False,
    "bind.wait_s": 3.0,
}

#: Bounds of waits that end at once on working code (the node's inventory reaching the API
#: server, the scheduler's first list): only there so a broken test fails instead of hanging.
READY_WAIT_S = 10.0


class PodFlow:
    """The scheduler, the node agent and a fake kubelet on one fake API server (see above).

    *node_host* is the node agent's plugin host (the vendor registered with its node
    configuration and ``node_name``); *scheduler_host* is the scheduler's. Both are closed
    when the flow stops. *vendor* names the vendor whose resource and inventory entering
    waits for. *node_config* overrides :func:`~xpushare.testing.nodeagent.fast_node_config`
    fields; *scheduler_settings* override :data:`SCHEDULER_SETTINGS` (dotted names, as
    ``xpushare scheduler`` reads them).
    """

    def __init__(
        self,
        node_host: PluginHost,
        scheduler_host: PluginHost,
        *,
        vendor: str,
        node_name: str = "node-a",
        node_config: Mapping[str, Any] | None = None,
        scheduler_settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.node_host = node_host
        self.scheduler_host = scheduler_host
        self.vendor = vendor
        self.node_name = node_name
        #: The vendor's device-plugin resource on the node, e.g. ``nvidia.com/gpu``.
        self.resource = node_host.vendor(vendor).spec.resource_names.count
        self.api = FakeApiServer()
        self._node_config = dict(node_config or {})
        self._settings = {**SCHEDULER_SETTINGS, **(scheduler_settings or {})}
        self._stack = contextlib.AsyncExitStack()
        self._running: RunningAgent | None = None
        self._scheduler: Scheduler | None = None
        self._http: aiohttp.ClientSession | None = None
        self.url = ""

    # -- life cycle --------------------------------------------------------------------------

    async def __aenter__(self) -> PodFlow:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()

    async def _start(self) -> None:
        stack = self._stack
        # Entered first, left last: the API server outlives every client of it.
        await stack.enter_async_context(self.api)
        self.api.put("nodes", node(self.node_name))
        stack.callback(self.scheduler_host.close)
        plugin_dir: Path = stack.enter_context(short_socket_dir("xpf"))
        agent_kube = KubeClient.for_host(self.node_name, self.api.url)
        stack.callback(agent_kube.close)
        self._running = await stack.enter_async_context(
            run_node_agent(
                self.node_host, agent_kube, plugin_dir, wait_for=self.resource, **self._node_config
            )
        )
        key = inventory_key(self.vendor)
        await self.api.wait_for(lambda: key in self.node_annotations(), READY_WAIT_S)
        sched_kube = await Kube.connect(KubeSettings(server=self.api.url))
        stack.push_async_callback(sched_kube.close)
        scheduler = Scheduler(
            load_config(environ={}, overrides=self._settings),
            host=self.scheduler_host,
            kube=sched_kube,
        )
        stack.push_async_callback(scheduler.stop)
        await scheduler.start()
        await scheduler.wait_synced(READY_WAIT_S)
        self._scheduler = scheduler
        self.url = f"http://127.0.0.1:{scheduler.ports['main']}"
        self._http = await stack.enter_async_context(aiohttp.ClientSession())

    # -- the parts, for assertions the steps below do not cover -----------------------------

    @property
    def scheduler(self) -> Scheduler:
        assert self._scheduler is not None, "PodFlow is not started: use `async with`"
        return self._scheduler

    @property
    def kubelet(self) -> FakeKubelet:
        assert self._running is not None, "PodFlow is not started: use `async with`"
        return self._running.kubelet

    @property
    def agent(self) -> RunningAgent:
        assert self._running is not None, "PodFlow is not started: use `async with`"
        return self._running

    def node_annotations(self) -> dict[str, str]:
        """The node's annotations as the API server has them now."""
        current = self.api.get("nodes", self.node_name) or {}
        annotations: dict[str, str] = current.get("metadata", {}).get("annotations") or {}
        return annotations

    def handoff_annotations(self) -> dict[str, str]:
        """The annotations of the node's handoff Lease ({} before the first bind): where
        /bind writes ``xpushare.io/handoff``, which Allocate reads."""
        return handoff_annotations(self.api, self.node_name)

    # -- the steps of a pod ------------------------------------------------------------------

    async def review(self, pod: Object, *, operation: str = "CREATE") -> Object:
        """Send *pod* to the admission webhook; the ``AdmissionReview`` response, as is."""
        meta = pod.get("metadata", {})
        body = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"review-{meta.get('name', '')}",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": meta.get("namespace", "default"),
                "operation": operation,
                "userInfo": {"username": "tester"},
                "object": pod,
                "oldObject": None,
                "dryRun": False,
            },
        }
        answer = await self._post(self.scheduler.config.server.webhook_path, body)
        response: Object = answer["response"]
        return response

    async def admit(self, pod: Object) -> Object:
        """*pod* as the webhook admits it (its patch applied); fails if the webhook refuses."""
        response = await self.review(pod)
        assert response["allowed"], response
        patch = json.loads(base64.b64decode(response.get("patch", "W10=")))  # "[]"
        return json_patch(pod, patch)

    def create(self, pod: Object) -> Object:
        """Store *pod* in the API server (after admission); the stored object, uid included."""
        return self.api.put("pods", pod)

    async def filter(self, pod: Object, nodes: Sequence[str] | None = None) -> Object:
        """Ask the extender's ``/filter`` which of *nodes* (default: this node) fit *pod*."""
        wanted = [self.node_name] if nodes is None else list(nodes)
        body = {"Pod": pod, "Nodes": None, "NodeNames": wanted}
        result: Object = await self._post(self._extender("filter"), body)
        return result

    async def bind(self, pod: Object, node_name: str | None = None) -> Object:
        """Ask the extender's ``/bind`` to bind *pod* to *node_name* (default: this node)."""
        meta = pod["metadata"]
        body = {
            "PodName": meta["name"],
            "PodNamespace": meta.get("namespace", "default"),
            "PodUID": meta.get("uid", ""),
            "Node": node_name or self.node_name,
        }
        result: Object = await self._post(self._extender("bind"), body)
        return result

    async def schedule(self, pod: Object) -> Object:
        """Admit, create, filter and bind *pod* onto this node, as the cluster would.

        Fails if the webhook refuses it, /filter does not pass this node, or /bind errs.
        Returns the pod as the API server holds it after bind: the webhook's changes,
        ``spec.nodeName`` and the assignment annotation in it.
        """
        created = self.create(await self.admit(pod))
        # /filter places by the scheduler's cluster view; wait until its watches caught up.
        await self.api.wait_for(lambda: self.scheduler.cluster.synced, READY_WAIT_S)
        filtered = await self.filter(created)
        assert filtered.get("NodeNames") == [self.node_name], filtered
        bound = await self.bind(created)
        assert not bound.get("Error"), bound
        meta = created["metadata"]
        stored = self.api.get("pods", meta["name"], meta.get("namespace", "default"))
        assert stored is not None, f"pod {meta['name']} vanished after bind"
        return stored

    async def allocate(
        self, pod: Object, containers: Sequence[ContainerSpec] | None = None
    ) -> dict[str, ContainerResult]:
        """kubelet admits *pod* on this node: each container's Allocate results, by name.

        *containers* default to the pod's (init containers too) with their limits of the
        resources kubelet has registered, as kubelet's device manager reads them.
        """
        if containers is None:
            containers = self._device_containers(pod)
        meta = pod["metadata"]
        try:
            results = await self.kubelet.admit_pod(meta["uid"], containers)
        except AdmissionError as exc:
            self.admitted(pod, failed=str(exc))
            raise
        self.admitted(pod)
        return results

    async def handoff_served(self, timeout_s: float = READY_WAIT_S) -> None:
        """Wait until the handoff /bind wrote last has served: kubelet admitted its pod (the
        status write :meth:`allocate` plays) and the scheduler has seen it, so the node is
        free for the next bind. The handoff stays as written (the node agent writes nothing
        back): that is checked too."""
        raw = self.handoff_annotations()[HANDOFF_KEY]
        pod = decode_handoff(raw, node=self.node_name).pod
        cluster = self.scheduler.cluster
        await self.api.wait_for(lambda: cluster.admitted_on(self.node_name, pod), timeout_s)
        assert self.handoff_annotations().get(HANDOFF_KEY) == raw, "the handoff was rewritten"

    def admitted(self, pod: Object, *, failed: str = "") -> None:
        """kubelet's first status write after its admission of *pod*: ``status.startTime``
        (and phase Failed when admission refused it), which frees the node's handoff for
        the next bind (DESIGN.md §6). :meth:`allocate` calls it; a test that admits through
        ``flow.kubelet`` itself calls it as kubelet would."""
        meta = pod["metadata"]
        namespace = meta.get("namespace", "default")
        if self.api.get("pods", meta["name"], namespace) is None:
            return  # deleted meanwhile: kubelet has no status to write

        def stamp(obj: Object) -> None:
            status = obj.setdefault("status", {})
            status.setdefault(
                "startTime", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            )
            if failed:
                status.update(phase="Failed", reason="UnexpectedAdmissionError", message=failed)

        self.api.modify("pods", meta["name"], stamp, namespace)

    async def delete(self, pod: Object) -> None:
        """The pod is deleted: gone from the API server, its devices free again at kubelet."""
        meta = pod["metadata"]
        self.api.delete("pods", meta["name"], meta.get("namespace", "default"))
        self.kubelet.remove_pod(meta["uid"])

    # -- internals ---------------------------------------------------------------------------

    def _device_containers(self, pod: Object) -> list[ContainerSpec]:
        spec = pod.get("spec", {})
        found: list[ContainerSpec] = []
        for init, key in ((True, "initContainers"), (False, "containers")):
            for container in spec.get(key) or []:
                limits = (container.get("resources") or {}).get("limits") or {}
                requests = {
                    name: int(value)
                    for name, value in limits.items()
                    if self.kubelet.registered(name)
                }
                if requests:
                    found.append(ContainerSpec(container["name"], requests, init=init))
        return found

    def _extender(self, verb: str) -> str:
        return f"{self.scheduler.config.server.extender_prefix.rstrip('/')}/{verb}"

    async def _post(self, path: str, body: Any) -> Any:
        assert self._http is not None, "PodFlow is not started: use `async with`"
        async with self._http.post(f"{self.url}{path}", json=body) as response:
            assert response.status == 200, await response.text()
            return await response.json()

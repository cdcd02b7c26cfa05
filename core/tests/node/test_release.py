"""Releasing what an ended pod held: the hook, the durable ledger, the pod watch, PodResources."""

import threading

from nodekit import NODE, eventually, running
from vendors import Keeper

from xpushare.codec import ASSIGNMENT_KEY, encode_assignment
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.node import KubeClient
from xpushare.node.ledger import pod_key
from xpushare.testing import apiserver
from xpushare.testing.apiserver import FakeApiServer
from xpushare.testing.hosts import vendor_host
from xpushare.testing.kube import InMemoryKube
from xpushare.testing.kubelet import ContainerSpec, FakeKubelet


def keeper_host(keeper):
    return vendor_host("keeper", keeper, node_name=NODE, strict=True)


def slice_of(device, name="main", init=False):
    return ContainerAssignment(
        container=name,
        vendor="keeper",
        init=init,
        devices=(DeviceSlice(device_id=device, memory_mib=1024, compute_percent=10),),
    )


async def admit(run, kube, name, device="KEEP-0", containers=("main",)):
    pod = kube.add_pod(name)
    kube.bind(
        pod,
        PodAssignment(node=NODE, containers=tuple(slice_of(device, c) for c in containers)),
    )
    await run.kubelet.admit_pod(
        pod.uid, [ContainerSpec(c, {Keeper.resource: 1}) for c in containers], name=name
    )
    return pod


def end(run_or_kubelet, kube, pod):
    kube.remove_pod(pod.namespace, pod.name)
    kubelet = getattr(run_or_kubelet, "kubelet", run_or_kubelet)
    kubelet.remove_pod(pod.uid)


async def test_a_deleted_pod_is_released_once_on_the_vendor_thread(plugin_dir, tmp_path):
    keeper = Keeper(tmp_path / "made")
    kube = InMemoryKube(NODE)
    async with running(
        plugin_dir, host=keeper_host(keeper), kube=kube, wait_for=Keeper.resource
    ) as run:
        pod = await admit(run, kube, "job", containers=("main", "side"))
        assert keeper.left() == [f"{pod.uid}/main", f"{pod.uid}/side"]
        request = keeper.allocations[0]
        assert request.pod.name == "job" and request.pod.namespace == "default"
        await run.agent.releases.release_ended()
        assert keeper.releases == [] and keeper.left()  # still running: nothing freed
        end(run, kube, pod)
        await eventually(lambda: keeper.left() == [], "the pod's directories removed")
        await eventually(lambda: len(run.agent.ledger) == 0, "the ledger forgets the pod")
        assert [uid for uid, _ in keeper.releases] == [pod.uid]
        assert keeper.releases[0][1] != threading.get_ident()  # the library thread, not the loop
        assert not list(run.agent.config.ledger_dir.glob("*.json"))


async def test_a_finished_pod_is_released_and_a_failing_release_is_retried(plugin_dir, tmp_path):
    keeper = Keeper(tmp_path / "made")
    kube = InMemoryKube(NODE)
    async with running(
        plugin_dir, host=keeper_host(keeper), kube=kube, wait_for=Keeper.resource
    ) as run:
        pod = await admit(run, kube, "batch")
        keeper.fail_release = True
        kube.pods["default", "batch"]["status"]["phase"] = "Succeeded"
        await eventually(lambda: len(keeper.releases) >= 2, "release tried again after a failure")
        assert keeper.left() == [f"{pod.uid}/main"] and len(run.agent.ledger) == 1
        errors = run.agent.metrics.hook_errors.labels("keeper", "release")._value.get()
        assert errors >= 2
        keeper.fail_release = False
        await eventually(lambda: keeper.left() == [], "released once the vendor recovers")
        await eventually(lambda: len(run.agent.ledger) == 0, "the ledger forgets the pod")


async def test_kubelet_still_listing_the_pod_holds_the_release(plugin_dir, tmp_path):
    """A force-deleted pod leaves the API at once; kubelet lists it until it has stopped."""
    keeper = Keeper(tmp_path / "made")
    kube = InMemoryKube(NODE)
    resources = plugin_dir / "pr.sock"
    kubelet = FakeKubelet(plugin_dir, dial_timeout_s=2.0, pod_resources_socket=resources)
    await kubelet.start()
    try:
        async with running(
            plugin_dir,
            host=keeper_host(keeper),
            kube=kube,
            kubelet=kubelet,
            wait_for=Keeper.resource,
            pod_resources_socket=resources,
        ) as run:
            tracker = run.agent.releases
            pod = await admit(run, kube, "forced")
            kube.remove_pod(pod.namespace, pod.name)  # the API forgets it; kubelet has not
            await eventually(lambda: tracker.api_ended(pod_key(pod)) != "", "API says over")
            seen = kubelet.pod_resources_calls
            await kubelet.wait_until(lambda: kubelet.pod_resources_calls >= seen + 2)
            await tracker.release_ended()
            assert keeper.left() == [f"{pod.uid}/main"] and keeper.releases == []
            kubelet.remove_pod(pod.uid)  # its containers have stopped
            await eventually(lambda: keeper.left() == [], "released once kubelet lets go")
    finally:
        await kubelet.stop()


async def test_a_thousand_pods_with_agent_restarts_leave_nothing_behind(plugin_dir, tmp_path):
    """Pods end while the agent runs and while it is down; every directory is removed."""
    root = tmp_path / "made"
    kube = InMemoryKube(NODE)
    kubelet = FakeKubelet(plugin_dir, dial_timeout_s=2.0)
    await kubelet.start()
    sessions, per_session = 5, 200
    released: set[str] = set()
    everyone: set[str] = set()
    try:
        for session in range(sessions + 1):
            keeper = Keeper(root, devices=32)  # a new process: nothing kept in memory
            # Each Allocate fsyncs the ledger: on a loaded test machine that can take seconds.
            async with running(
                plugin_dir,
                host=keeper_host(keeper),
                kube=kube,
                kubelet=kubelet,
                wait_for=Keeper.resource,
                allocate_deadline_s=20.0,
            ) as run:
                if session == sessions:  # the last start only cleans up after the others
                    await eventually(lambda: len(run.agent.ledger) == 0, "all released", 60)
                    released |= {uid for uid, _ in keeper.releases}
                    break
                pods = []
                for i in range(per_session):
                    pods.append(await admit(run, kube, f"s{session}-p{i}", f"KEEP-{i % 32}"))
                # Half end while this agent runs (a quarter finish, a quarter are deleted) ...
                for i, pod in enumerate(pods[: per_session // 2]):
                    if i % 2:
                        kube.pods[pod.namespace, pod.name]["status"]["phase"] = "Succeeded"
                        kubelet.remove_pod(pod.uid)
                    else:
                        end(kubelet, kube, pod)
                await eventually(
                    lambda: len(run.agent.ledger) == per_session // 2, "half released", 60
                )
                released |= {uid for uid, _ in keeper.releases}
                everyone |= {pod.uid for pod in pods}
            # ... and the other half while no agent runs.
            for pod in pods[per_session // 2 :]:
                end(kubelet, kube, pod)
        # Each pod released at least once (a release cut short by a stop runs again).
        assert len(everyone) == sessions * per_session and released == everyone
        assert keeper.left() == []
        assert not list((plugin_dir / "xpushare-state").glob("*.json"))
    finally:
        await kubelet.stop()


async def test_the_pod_watch_of_the_real_client_releases_a_deleted_pod(plugin_dir, tmp_path):
    keeper = Keeper(tmp_path / "made")
    async with FakeApiServer() as api:
        api.put("nodes", apiserver.node(NODE))
        client = KubeClient.for_host(NODE, api.url)
        try:
            # No relist and no poll within the test: only the watch can tell the agent.
            async with running(
                plugin_dir,
                host=keeper_host(keeper),
                kube=client,
                wait_for=Keeper.resource,
                release_poll_s=60.0,
            ) as run:
                await run.agent.releases.api_synced.wait()
                created = api.put("pods", apiserver.pod("web", node_name=NODE))
                uid = created["metadata"]["uid"]
                assignment = PodAssignment(node=NODE, containers=(slice_of("KEEP-2"),))
                api.modify(
                    "pods",
                    "web",
                    lambda p: p["metadata"]["annotations"].update(
                        {ASSIGNMENT_KEY: encode_assignment(assignment)}
                    ),
                    "default",
                )
                await run.kubelet.admit_pod(
                    uid, [ContainerSpec("main", {Keeper.resource: 1})], name="web"
                )
                assert keeper.left() == [f"{uid}/main"]
                api.delete("pods", "web", "default")
                await eventually(lambda: keeper.left() == [], "released from the watch event")
                gets = [r for r in api.requests if r.method == "GET" and "watch" in r.query]
                assert gets, "the agent watched the node's pods"
        finally:
            client.close()


async def test_allocate_is_given_the_pods_namespace_name_and_annotations(plugin_dir, tmp_path):
    keeper = Keeper(tmp_path / "made")
    kube = InMemoryKube(NODE)
    async with running(
        plugin_dir, host=keeper_host(keeper), kube=kube, wait_for=Keeper.resource
    ) as run:
        pod = kube.add_pod(
            "qos", namespace="team", annotations={"metax-tech.com/sgpu-qos-policy": "fixed-share"}
        )
        kube.bind(pod, PodAssignment(node=NODE, containers=(slice_of("KEEP-1"),)))
        await run.kubelet.admit_pod(pod.uid, [ContainerSpec("main", {Keeper.resource: 1})])
        (request,) = keeper.allocations
        assert (request.pod.namespace, request.pod.name) == ("team", "qos")
        assert request.pod_annotations["metax-tech.com/sgpu-qos-policy"] == "fixed-share"

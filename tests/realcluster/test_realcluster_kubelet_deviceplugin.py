"""A real kubelet's device manager calling our node agent's device plugins.

One node for the module: kubelet (registered as ``system:node:NAME`` under Node
authorization) in front of our fake container runtime, and the node agent serving it with
two vendors: the mock vendor, and NVIDIA over the fake NVML (two A100s) with HAMi-core. A
pod written for HAMi goes through our webhook, kube-scheduler and our extender, is admitted
by kubelet, which calls our GetPreferredAllocation and Allocate; what kubelet then asks the
runtime to create is read from the runtime's record.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nvidia_fake import FakeNvidia
from realkit import (
    GROUP_LABEL,
    PODS_NAMESPACE,
    SYSTEM_NAMESPACE,
    Installed,
    agent_kubeconfig,
    eventually,
    gone,
    hami_pod,
    wait_pod,
)

from xpushare.codec import ASSIGNMENT_KEY, HANDOFF_KEY, decode_assignment, decode_handoff
from xpushare.node.kube import KubeClient
from xpushare.plugins.builtin import mock
from xpushare.testing.realcluster import AgentThread, KubeletNode, config_env, config_for

pytestmark = pytest.mark.realcluster

NODE = "kubelet-dp"
GROUP = "kubelet-dp"
GPU = "nvidia.com/gpu"
MOCK = "xpushare.io/mock-gpu"
#: Share slots per device (the mock's and the NVIDIA plugin's default: ten pods a GPU).
SHARES = 10

#: Bound of waits for what kubelet does within seconds on a working node (a Node status
#: update, a pod started, a deleted pod's teardown): only so a broken flow fails.
KUBELET_WAIT_S = 60.0


@dataclass
class GpuNode:
    installed: Installed
    node: KubeletNode
    agent: AgentThread
    hami_dir: Path

    def allocations(self, vendor: str, call: str) -> float:
        """Successful calls of kind *call* ("allocate", "preferred") to *vendor*'s plugin."""
        assert self.agent.agent is not None
        labels = {"vendor": vendor, "call": call, "outcome": "ok"}
        found = self.agent.agent.metrics.registry.get_sample_value(
            "xpushare_allocate_duration_seconds_count", labels
        )
        return found or 0.0


@pytest.fixture(scope="module")
def gpu_node(installed: Installed, fake_nvidia: FakeNvidia) -> Iterator[GpuNode]:
    fake_nvidia.fake.add_gpus(2)
    with KubeletNode(installed.plane, NODE, labels={GROUP_LABEL: GROUP}) as node:
        kube = KubeClient.from_environment(
            NODE,
            kubeconfig=str(agent_kubeconfig(installed, NODE)),
            handoff_namespace=SYSTEM_NAMESPACE,
        )
        host = fake_nvidia.host(NODE, mock=(mock, {"devices": "2x A100-80GB"}))
        with AgentThread(config_for(node), host, kube) as agent:
            yield GpuNode(installed, node, agent, fake_nvidia.hami_dir)


def registered(node: GpuNode) -> bool:
    agent = node.agent.agent
    return agent is not None and all(
        vendor in agent.plugins and agent.plugins[vendor].registered
        for vendor in ("mock", "nvidia")
    )


def train_pod(name: str) -> dict[str, Any]:
    body = hami_pod(name, GROUP, **{GPU: "1", "nvidia.com/gpumem": "8000"})
    body["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "30"
    body["spec"]["automountServiceAccountToken"] = False
    return body


def running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def test_our_plugins_register_and_the_node_shows_our_resources(gpu_node: GpuNode) -> None:
    gpu_node.agent.wait(lambda _: registered(gpu_node), "both plugins registered with kubelet")

    def listed() -> bool:
        capacity = gpu_node.node.capacity()
        return capacity.get(GPU) == str(2 * SHARES) and capacity.get(MOCK) == str(2 * SHARES)

    assert eventually(listed, KUBELET_WAIT_S), gpu_node.node.capacity()
    node = gpu_node.node.node()
    assert node is not None
    assert node["status"]["allocatable"][GPU] == str(2 * SHARES)
    # The runtime kubelet reports is ours, and it answered RuntimeConfig (kubelet 1.36 takes
    # its cgroup driver from it and would not have started otherwise).
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith(
        "xpushare-fake-runtime://"
    )


def test_kubelet_admits_a_pod_and_the_runtime_gets_hami_core(gpu_node: GpuNode) -> None:
    installed = gpu_node.installed
    gpu_node.agent.wait(lambda _: registered(gpu_node), "both plugins registered with kubelet")
    assert eventually(lambda: gpu_node.node.capacity().get(GPU) == str(2 * SHARES), 60)
    allocated = gpu_node.allocations("nvidia", "allocate")
    preferred = gpu_node.allocations("nvidia", "preferred")

    installed.core.create_namespaced_pod(PODS_NAMESPACE, train_pod("dp-train"))
    pod = wait_pod(installed, "dp-train", running, "running", deadline=_deadline())
    assert pod["spec"]["nodeName"] == NODE
    (container,) = decode_assignment(pod["metadata"]["annotations"][ASSIGNMENT_KEY]).containers
    (device,) = container.devices

    # kubelet asked our plugin for its preference among the node's 20 shares, then
    # allocated the one it chose (Allocate names no pod: the handoff says which it is).
    assert gpu_node.allocations("nvidia", "preferred") > preferred
    assert gpu_node.allocations("nvidia", "allocate") > allocated
    # The agent wrote nothing back: the handoff still names the pod, and kubelet's own
    # status write (startTime) is what frees the node for the next bind.
    assert decode_handoff(_handoff_annotations(installed)[HANDOFF_KEY]).pod.name == "dp-train"
    assert pod["status"]["startTime"]

    (record,) = gpu_node.node.containers(PODS_NAMESPACE, "dp-train")
    config = record["request"]["config"]
    env = config_env(record)
    assert env["NVIDIA_VISIBLE_DEVICES"] == device.device_id
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8000m"
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == "30"
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/vgpu.cache"
    mounts = {m["container_path"]: m for m in config.get("mounts") or []}
    uid = pod["metadata"]["uid"]
    assert mounts["/usr/local/vgpu"]["host_path"] == f"/usr/local/vgpu/containers/{uid}_main"
    assert mounts["/usr/local/vgpu/libvgpu.so"].get("readonly") is True
    assert "/etc/ld.so.preload" in mounts
    # The device nodes kubelet passes are the ones our Allocate answered: the NVIDIA plugin
    # leaves /dev/nvidia* to the NVIDIA container runtime (NVIDIA_VISIBLE_DEVICES).
    assert not config.get("devices")
    # What HAMi-core's monitor reads: the container's cache folder, made by our Allocate.
    cache = gpu_node.hami_dir / "containers" / f"{uid}_main"
    assert cache.is_dir()

    # Deleted: kubelet stops the container; the pod leaves the API; our release hook frees
    # what Allocate made for it.
    installed.core.delete_namespaced_pod("dp-train", PODS_NAMESPACE, grace_period_seconds=1)
    assert eventually(lambda: gone(installed, "dp-train"), KUBELET_WAIT_S)
    calls = [
        c["call"] for c in gpu_node.node.calls() if c.get("pod") == f"{PODS_NAMESPACE}/dp-train"
    ]
    assert "StopContainer" in calls
    assert eventually(lambda: not cache.exists(), KUBELET_WAIT_S), "HAMi-core cache not freed"


#: How long the test holds our Allocate back: long enough to read the pod's status a few times
#: while kubelet waits for the answer.
HOLD_S = 3.0


def test_kubelet_stamps_start_time_after_our_allocate_which_frees_the_handoff(
    gpu_node: GpuNode,
) -> None:
    """What the handoff's release rests on (DESIGN.md §6): the real kubelet writes a pod's
    ``status.startTime`` only after every Allocate of it has answered, and the scheduler
    binds the next pod to the node on that write alone, the node agent writing nothing."""
    import asyncio
    import threading

    installed = gpu_node.installed
    gpu_node.agent.wait(lambda _: registered(gpu_node), "both plugins registered with kubelet")
    assert eventually(lambda: gpu_node.node.capacity().get(GPU) == str(2 * SHARES), 60)
    agent = gpu_node.agent.agent
    assert agent is not None
    allocator = agent.allocator
    original = allocator.allocate
    held = threading.Event()
    answered = threading.Event()

    async def held_back(vendor: str, resource: str, ids: Any) -> Any:
        held.set()
        await asyncio.sleep(HOLD_S)
        try:
            return await original(vendor, resource, ids)
        finally:
            answered.set()

    allocator.allocate = held_back  # type: ignore[method-assign,assignment]
    try:
        installed.core.create_namespaced_pod(PODS_NAMESPACE, train_pod("dp-held"))
        assert held.wait(KUBELET_WAIT_S), "kubelet never called Allocate"
        # The next pod for the node comes while the first one's Allocate is held: its bind
        # waits for the node's handoff.
        installed.core.create_namespaced_pod(PODS_NAMESPACE, train_pod("dp-next"))
        seen = []
        while not answered.is_set():
            first = installed.core.read_namespaced_pod("dp-held", PODS_NAMESPACE)
            second = installed.core.read_namespaced_pod("dp-next", PODS_NAMESPACE)
            if not answered.is_set():
                seen.append((first.spec.node_name, first.status.start_time, second.spec.node_name))
            time.sleep(0.2)
        assert seen, "no read while Allocate was held"
        assert all(seen_ == (NODE, None, None) for seen_ in seen), seen
    finally:
        del allocator.allocate  # the class's method again
    pod = wait_pod(installed, "dp-held", running, "running", deadline=_deadline())
    assert pod["status"]["startTime"]
    # Then the next pod binds: kubelet's status write freed the handoff.
    wait_pod(installed, "dp-next", running, "running", deadline=_deadline())
    assert decode_handoff(_handoff_annotations(installed)[HANDOFF_KEY]).pod.name == "dp-next"
    for name in ("dp-held", "dp-next"):
        installed.core.delete_namespaced_pod(name, PODS_NAMESPACE, grace_period_seconds=1)
    for name in ("dp-held", "dp-next"):
        assert eventually(lambda name=name: gone(installed, name), KUBELET_WAIT_S)


def test_kubelet_restart_our_plugins_register_again_and_the_pod_keeps_its_device(
    gpu_node: GpuNode,
) -> None:
    installed = gpu_node.installed
    gpu_node.agent.wait(lambda _: registered(gpu_node), "both plugins registered with kubelet")
    assert eventually(lambda: gpu_node.node.capacity().get(GPU) == str(2 * SHARES), 60)
    installed.core.create_namespaced_pod(PODS_NAMESPACE, train_pod("dp-keep"))
    wait_pod(installed, "dp-keep", running, "running", deadline=_deadline())
    held = gpu_node.node.pod_devices(PODS_NAMESPACE, "dp-keep")
    assert len(held.get(GPU, ())) == 1, held
    agent = gpu_node.agent.agent
    assert agent is not None
    before = {vendor: agent.plugins[vendor].registrations for vendor in ("mock", "nvidia")}
    created = len(gpu_node.node.containers(PODS_NAMESPACE, "dp-keep"))

    started = time.monotonic()
    gpu_node.node.restart()
    # kubelet re-creates kubelet.sock at start: each plugin sees it and registers again.
    gpu_node.agent.wait(
        lambda a: all(
            a.plugins[v].registrations > before[v] and a.plugins[v].registered for v in before
        ),
        "both plugins registered again after kubelet's restart",
        KUBELET_WAIT_S,
    )
    took = time.monotonic() - started
    print(f"\nkubelet restarted; both plugins registered again {took:.1f} s after its stop")
    assert eventually(lambda: gpu_node.node.capacity().get(GPU) == str(2 * SHARES), 60)
    # The running pod keeps its device: kubelet read its checkpoint back, the container was
    # not created again, and PodResources still gives it the same share.
    assert eventually(lambda: gpu_node.node.pod_devices(PODS_NAMESPACE, "dp-keep") == held, 30)
    assert len(gpu_node.node.containers(PODS_NAMESPACE, "dp-keep")) == created
    pod = installed.core.read_namespaced_pod("dp-keep", PODS_NAMESPACE)
    assert pod.status.phase == "Running"

    installed.core.delete_namespaced_pod("dp-keep", PODS_NAMESPACE, grace_period_seconds=1)
    assert eventually(lambda: gone(installed, "dp-keep"), KUBELET_WAIT_S)


def _handoff_annotations(installed: Installed) -> dict[str, str]:
    from kubernetes import client

    from xpushare.codec import handoff_lease_name

    leases = client.CoordinationV1Api(installed.core.api_client)
    lease = leases.read_namespaced_lease(handoff_lease_name(NODE), SYSTEM_NAMESPACE)
    return lease.metadata.annotations or {}


def _deadline() -> float:
    return time.monotonic() + KUBELET_WAIT_S


def test_the_daemonsets_command_registers_with_a_real_kubelet(installed: Installed) -> None:
    """``xpushare node`` itself (the DaemonSet's command, a process of its own, flags as the
    chart passes them) with the mock vendor: its resource on the Node, and again after a
    kubelet restart."""
    import os
    import subprocess

    import yaml

    name = "kubelet-cli"
    with KubeletNode(installed.plane, name, labels={GROUP_LABEL: name}) as node:
        vendors = node.home / "vendors.yaml"
        vendors.write_text(yaml.safe_dump({"mock": {"devices": "3x A100-80GB"}}))
        args = [
            sys.executable,
            "-m",
            "xpushare.cli",
            "node",
            f"--node-name={name}",
            f"--kubeconfig={agent_kubeconfig(installed, name)}",
            f"--device-plugin-dir={node.device_plugin_dir}",
            f"--pod-resources-socket={node.pod_resources_socket}",
            f"--vendor-config={vendors}",
            "--metrics-host=127.0.0.1",
            "--metrics-port=0",
            "--partition-lock=",
        ]
        env = {**os.environ, "XPUSHARE_PLUGINS": "mock", "PYTHONUNBUFFERED": "1"}
        log = installed.plane.logs / f"xpushare-node-{name}.log"
        with log.open("ab") as out:
            agent = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:

            def listed() -> bool:
                capacity = node.capacity()
                return capacity.get(MOCK) == str(3 * SHARES) and agent.poll() is None

            assert eventually(listed, KUBELET_WAIT_S), (node.capacity(), log.read_text())
            node.restart()
            assert node.kubelet is not None
            kubelet_log = node.kubelet.log_path

            def registered_twice() -> bool:
                text = kubelet_log.read_text(errors="replace")
                asked = (
                    f'registration request from device plugin with resource" resourceName="{MOCK}"'
                )
                return text.count(asked) == 2 and agent.poll() is None

            assert eventually(registered_twice, KUBELET_WAIT_S), log.read_text()
            assert eventually(listed, KUBELET_WAIT_S), node.capacity()
        finally:
            agent.terminate()
            agent.wait(10)

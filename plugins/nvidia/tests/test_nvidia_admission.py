"""The NVIDIA plugin's admission guard: the webhook guards the paths Allocate really mounts.

The scheduler gets the same ``nvidia`` section as the node agents, so a HAMi-core directory
moved by configuration is guarded where it is; the scheduler-side host is built the way
``xpushare scheduler`` builds it (no node, no NVML).
"""

from __future__ import annotations

from typing import Any

import pytest

from xpushare import PluginError
from xpushare.plugins import PluginHost
from xpushare.scheduler.cluster import ClusterState
from xpushare.scheduler.config import WebhookConfig
from xpushare.scheduler.webhook import Webhook
from xpushare.scheduling.ledger import UsageLedger
from xpushare.testing.hosts import vendor_host
from xpushare_nvidia import plugin

MOVED = {
    "hami_core": {"host_dir": "/var/lib/hami//vgpu/", "container_dir": "/opt/hami", "preload": True}
}


def scheduler_host(config: dict[str, Any]) -> PluginHost:
    return vendor_host("nvidia", plugin, config, node_name=None)


def webhook(host: PluginHost) -> Webhook:
    return Webhook(
        host=host, cluster=ClusterState(UsageLedger()), config=WebhookConfig(), scheduler_name="s"
    )


def review(obj: dict[str, Any]) -> dict[str, Any]:
    request = {"uid": "u", "operation": "CREATE", "namespace": "team", "object": obj}
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return body


def gpu_pod(volume: dict[str, Any], mount: str, **container: Any) -> dict[str, Any]:
    main = {
        "name": "main",
        "image": "cuda",
        "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}},
        "volumeMounts": [{"name": "v", "mountPath": mount}],
        **container,
    }
    spec = {"containers": [main], "volumes": [{"name": "v", **volume}]}
    return {"metadata": {"name": "p", "namespace": "team"}, "spec": spec}


def test_the_guard_follows_the_hami_core_settings() -> None:
    host = scheduler_host({})
    try:
        guard = host.vendor("nvidia").admission_guard()
    finally:
        host.close()
    assert guard.container_paths == ("/etc/ld.so.preload", "/usr/local/vgpu")
    assert guard.host_paths == ("/usr/local/vgpu",)
    assert guard.device_paths == ("/dev/nvidia*",)
    assert "CUDA_DISABLE_CONTROL" in guard.env and "CUDA_DEVICE_MEMORY_LIMIT*" in guard.env
    host = scheduler_host(MOVED)
    try:
        moved = host.vendor("nvidia").admission_guard()
    finally:
        host.close()
    assert moved.container_paths == ("/etc/ld.so.preload", "/opt/hami")
    assert moved.host_paths == ("/var/lib/hami/vgpu",)  # normalised as pod paths are


def test_a_wrong_nvidia_section_is_named_and_refuses_gpu_pods_only() -> None:
    host = scheduler_host({"hami_core": {"host_dir": "/x", "colour": "blue"}})
    try:
        with pytest.raises(PluginError, match="colour"):
            host.vendor("nvidia").admission_guard()
        hook = webhook(host)
        refused = hook.review(review(gpu_pod({"emptyDir": {}}, "/data")))["response"]
        assert refused["allowed"] is False and refused["status"]["code"] == 500
        plain = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}}
        assert hook.review(review(plain))["response"]["allowed"] is True
    finally:
        host.close()


@pytest.mark.parametrize(
    ("volume", "mount", "field"),
    [
        ({"hostPath": {"path": "/var/lib/hami/vgpu"}}, "/data", "spec.volumes[0].hostPath.path"),
        ({"hostPath": {"path": "/var/lib"}}, "/data", "spec.volumes[0].hostPath.path"),
        ({"emptyDir": {}}, "/opt/hami", "spec.containers[0].volumeMounts[0].mountPath"),
        ({"emptyDir": {}}, "/opt", "spec.containers[0].volumeMounts[0].mountPath"),
        ({"emptyDir": {}}, "/etc", "spec.containers[0].volumeMounts[0].mountPath"),
    ],
)
def test_moved_hami_core_paths_are_guarded_where_they_are(
    volume: dict[str, Any], mount: str, field: str
) -> None:
    host = scheduler_host(MOVED)
    try:
        response = webhook(host).review(review(gpu_pod(volume, mount)))["response"]
    finally:
        host.close()
    assert response["allowed"] is False, response
    assert field in response["status"]["message"]


def test_the_default_path_is_free_once_moved_and_gpu_device_nodes_stay_guarded() -> None:
    host = scheduler_host(MOVED)
    try:
        hook = webhook(host)
        moved_away = gpu_pod({"hostPath": {"path": "/usr/local/vgpu"}}, "/data")
        assert hook.review(review(moved_away))["response"]["allowed"] is True
        sneaky = {
            "metadata": {"name": "miner"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "securityContext": {"privileged": True},
                        "volumeMounts": [{"name": "d", "mountPath": "/dev/nvidia0"}],
                    }
                ],
                "volumes": [{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}],
            },
        }
        response = hook.review(review(sneaky))["response"]
    finally:
        host.close()
    assert response["allowed"] is False
    assert "spec.volumes[0].hostPath.path '/dev/nvidia0'" in response["status"]["message"]


def test_gpumem_with_a_unit_is_refused_with_the_mib_it_likely_meant() -> None:
    # nvidia.com/gpumem counts MiB: "16Gi" was read as 17,179,869,184 MiB.
    host = scheduler_host({})
    try:
        hook = webhook(host)
        obj = gpu_pod({"emptyDir": {}}, "/data")
        obj["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "16Gi"
        refused = hook.review(review(obj))["response"]
        plain = gpu_pod({"emptyDir": {}}, "/data")
        plain["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "16384"
        admitted = hook.review(review(plain))["response"]
    finally:
        host.close()
    assert refused["allowed"] is False
    message = refused["status"]["message"]
    assert "nvidia.com/gpumem counts MiB" in message
    assert "'16Gi' read as bytes is 16384 MiB: write nvidia.com/gpumem: 16384" in message
    assert "container 'main'" in message
    assert admitted["allowed"] is True

"""``xpushare fit`` as an operator runs it for a Pending pod."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from xpushare.cli.main import main
from xpushare.codec import encode_assignment, encode_inventory
from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.plugins.builtin import mock

GPU = "xpushare.io/mock-gpu"
MEM = "xpushare.io/mock-gpumem"
CORES = "xpushare.io/mock-gpucores"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("XPUSHARE_PLUGINS", "mock")
    monkeypatch.delenv("XPUSHARE_MOCK_DEVICES", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return CliRunner()


def document(count: int = 1, memory: int = 20000, cores: int = 20, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "node": {
            "name": "gpu-1",
            "cpu_milli": 16000,
            "memory_mib": 65536,
            "devices": [
                {
                    "vendor": "mock",
                    "id": f"GPU-{i}",
                    "index": i,
                    "model": "A100-40GB",
                    "memory_mib": 40960,
                }
                for i in range(3)
            ],
        },
        "usage": [
            {
                "device_id": "GPU-0",
                "used_slots": 1,
                "used_memory_mib": 30000,
                "used_compute_percent": 30,
            },
            {"device_id": "GPU-2", "used_slots": 1, "used_memory_mib": 1000, "exclusive": True},
        ],
        "pod": {
            "ref": {"namespace": "ml", "name": "train"},
            "containers": [
                {"name": "main", "limits": {GPU: str(count), MEM: str(memory), CORES: str(cores)}}
            ],
        },
    }
    doc.update(extra)
    return doc


def run(runner: CliRunner, tmp_path: Path, doc: dict[str, Any], *args: str) -> Any:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    return runner.invoke(main, ["fit", str(path), *args])


def test_a_fitting_pod_shows_its_devices_and_the_skipped_ones(
    runner: CliRunner, tmp_path: Path
) -> None:
    result = run(runner, tmp_path, document())
    assert result.exit_code == 0, result.output
    assert "ml/train on node gpu-1: FITS" in result.output
    assert "-> GPU-1 (mock A100-40GB, index 1): 20000 MiB, 20% compute" in result.output
    assert "not enough free device memory" in result.output  # GPU-0, skipped
    assert "device held exclusively by another pod" in result.output  # GPU-2


def test_a_pod_that_does_not_fit_says_why_per_reason(runner: CliRunner, tmp_path: Path) -> None:
    result = run(runner, tmp_path, document(count=2))
    assert result.exit_code == 1, result.output
    assert "DOES NOT FIT" in result.output
    assert "1/3 devices usable" in result.output
    assert "not enough free device memory" in result.output


def test_json_output_for_machines(runner: CliRunner, tmp_path: Path) -> None:
    result = run(runner, tmp_path, document(count=2), "--json")
    assert result.exit_code == 1
    answer = json.loads(result.output)
    assert answer["fits"] is False and answer["node"] == "gpu-1" and answer["pod"] == "ml/train"
    [container] = answer["containers"]
    assert container["reasons"] == {
        "not enough free device memory": 1,
        "device held exclusively by another pod": 1,
        "too few devices left that fit the request": 1,
    }
    fitting = json.loads(run(runner, tmp_path, document(), "--json").output)
    assert fitting["fits"] is True
    [slice_] = fitting["containers"][0]["devices"]
    assert (slice_["device_id"], slice_["memory_mib"], slice_["compute_percent"]) == (
        "GPU-1",
        20000,
        20,
    )


def test_stdin_a_kubernetes_manifest_and_host_resources(runner: CliRunner) -> None:
    doc = document()
    doc["pod"] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "resources": {"limits": {GPU: 1, MEM: 1000}, "requests": {"cpu": "32"}},
                }
            ]
        },
    }
    result = runner.invoke(main, ["fit", "--json"], input=json.dumps(doc))
    answer = json.loads(result.output)
    assert answer["pod"] == "prod/web"
    assert answer["fits"] is False and answer["reason"] == "not enough free CPU on the node"


def test_a_bare_request_and_a_policy_choice(runner: CliRunner, tmp_path: Path) -> None:
    doc = document()
    del doc["pod"]
    doc["request"] = {"vendor": "mock", "memory_percent": 50, "compute_percent": 10}
    result = run(runner, tmp_path, doc, "--json", "--policy", "spread")
    answer = json.loads(result.output)
    assert answer["policy"] == "spread" and answer["fits"]
    assert answer["containers"][0]["devices"][0]["device_id"] == "GPU-1"


def test_bad_input_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    result = run(runner, tmp_path, {"node": {"name": "x"}})
    assert result.exit_code == 2 and "give the 'pod'" in result.output
    bad = document()
    bad["usage"] = [{"device_id": "GPU-9", "used_slots": 1}]
    result = run(runner, tmp_path, bad)
    assert result.exit_code == 2 and "GPU-9" in result.output


def kubectl_node() -> dict[str, Any]:
    """A Node as `kubectl get node gpu-1 -o yaml` prints it: 3 mock A100-40GB in our
    inventory annotation, 16 CPUs and 64 GiB allocatable."""
    devices = mock.parse_spec("3x A100-40GB", "gpu-1")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-1",
            "annotations": {
                "xpushare.io/inventory-mock": encode_inventory("mock", "gpu-1", devices)
            },
            "labels": {"kubernetes.io/hostname": "gpu-1"},
        },
        "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}},
    }


def kubectl_pod(name: str, node: str | None, assignment: Any = None, cpu: str = "1") -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "ml"}
    if assignment is not None:
        meta["annotations"] = {"xpushare.io/assignment": encode_assignment(assignment)}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {}}


def kubectl_pods(node_devices: list[Any]) -> dict[str, Any]:
    """`kubectl get pods -A -o yaml`: a List; one pod holds 30,000 MiB of GPU 0 and 12 CPUs
    on gpu-1, one is elsewhere, one ended."""
    held = PodAssignment(
        node="gpu-1",
        containers=(
            ContainerAssignment(
                container="main",
                vendor="mock",
                devices=(
                    DeviceSlice(device_id=node_devices[0].id, memory_mib=30000, compute_percent=30),
                ),
            ),
        ),
    )
    ended = kubectl_pod("done", "gpu-1", held, cpu="8")
    ended["status"]["phase"] = "Succeeded"
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            kubectl_pod("holder", "gpu-1", held, cpu="12"),
            kubectl_pod("elsewhere", "gpu-2", cpu="8"),
            ended,
        ],
    }


def test_kubectls_node_and_pods_are_read(runner: CliRunner, tmp_path: Path) -> None:
    """The form docs/troubleshooting.md tells operators to use: it said "'node' must be an
    object with a 'name' and its 'devices'"."""
    node_file = tmp_path / "node.yaml"
    node_file.write_text(yaml.safe_dump(kubectl_node()))
    devices = mock.parse_spec("3x A100-40GB", "gpu-1")
    pods_file = tmp_path / "pods.yaml"
    pods_file.write_text(yaml.safe_dump(kubectl_pods(devices)))
    wanted = kubectl_pod("train", None)
    wanted["spec"]["containers"][0]["resources"]["limits"] = {GPU: "3", MEM: "20000"}
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(wanted))
    args = ["fit", "--json", "--node", str(node_file), "--pods", str(pods_file), str(pod_file)]
    answer = json.loads(runner.invoke(main, args).output)
    # GPU 0 holds 30,000 of 40,960 MiB: three devices of 20,000 MiB do not fit.
    assert answer["pod"] == "ml/train" and answer["fits"] is False
    # Two do, and the CPU counts the bound pod's 12 of the 16 allocatable (not the ended one's).
    wanted["spec"]["containers"][0]["resources"]["limits"][GPU] = "2"
    wanted["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"
    pod_file.write_text(yaml.safe_dump(wanted))
    answer = json.loads(runner.invoke(main, args).output)
    assert answer["fits"] is True
    used = {d["device_id"] for d in answer["containers"][0]["devices"]}
    assert devices[0].id not in used
    wanted["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"
    pod_file.write_text(yaml.safe_dump(wanted))
    answer = json.loads(runner.invoke(main, args).output)
    assert answer["fits"] is False and answer["reason"] == "not enough free CPU on the node"
    # The same objects inside one document.
    doc = {"node": kubectl_node(), "usage": kubectl_pods(devices), "pod": wanted}
    assert json.loads(run(runner, tmp_path, doc, "--json").output)["fits"] is False


def test_a_kubectl_node_without_our_inventory_says_what_to_check(
    runner: CliRunner, tmp_path: Path
) -> None:
    bare = kubectl_node()
    bare["metadata"]["annotations"] = {}
    result = run(runner, tmp_path, document(node=bare))
    assert result.exit_code == 2
    assert "node gpu-1 carries no device" in result.output and "node agent" in result.output


def test_an_invalid_field_is_named_without_pydantics_urls(
    runner: CliRunner, tmp_path: Path
) -> None:
    bad = document()
    bad["usage"] = [{"device_id": "GPU-0", "used_slots": "many"}]
    result = run(runner, tmp_path, bad)
    assert result.exit_code == 2
    assert "used_slots" in result.output and "http" not in result.output


def test_an_unknown_policy_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    result = run(runner, tmp_path, document(), "--policy", "nope")
    assert result.exit_code == 2 and "nope" in result.output

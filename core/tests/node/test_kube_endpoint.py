"""How the agent finds and authenticates to the API server, without the official client."""

import pytest

from xpushare.node import kube
from xpushare.node.kube import KubeClient, KubeError
from xpushare.testing.imports import loaded_by


def test_in_cluster_reads_the_service_account_and_rereads_a_rotated_token(
    tmp_path, monkeypatch
) -> None:
    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", str(tmp_path))
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    endpoint = kube._in_cluster(env)
    assert endpoint.host == "https://[fd00::1]:6443"
    assert endpoint.ca_file == str(tmp_path / "ca.crt")
    assert endpoint.authorization() == "Bearer first"
    (tmp_path / "token").write_text("second")
    assert endpoint.authorization() == "Bearer second"


def test_in_cluster_without_a_token_says_what_to_mount(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", str(tmp_path / "none"))
    with pytest.raises(KubeError, match="service account"):
        KubeClient.from_environment("n", environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})


def test_the_agents_client_does_not_import_the_official_client() -> None:
    # ~11 MiB of the agent's RSS budget (see node/kube.py): only a kubeconfig loads it.
    code = (
        "from xpushare.node import KubeClient, NodeAgent\n"
        "KubeClient.for_host('n', 'http://127.0.0.1:1').close()\n"
    )
    assert loaded_by(code, ["kubernetes"]) == []


def test_a_kubeconfig_token_is_sent(tmp_path) -> None:
    # A kubeconfig user with a bearer token (a ServiceAccount's, an exec plugin's): the
    # official loader keeps it under "BearerToken" since kubernetes 37; without it the agent
    # spoke to a real API server as system:anonymous (tests/realcluster).
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: abc123}}]\n"
        "contexts: [{name: u, context: {cluster: c, user: u}}]\ncurrent-context: u\n"
    )
    client = KubeClient.from_environment("n", kubeconfig=str(kubeconfig), environ={})
    assert client.endpoint.authorization() == "Bearer abc123"
    client.close()

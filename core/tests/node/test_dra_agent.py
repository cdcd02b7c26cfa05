"""The node agent in DRA mode, end to end with the mock vendor: slices published, a claim
allocated as kube-scheduler writes it, prepared into a CDI spec with the limits, the agent
restarted in the middle, unprepared, nothing left."""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes.client import ApiClient
from nodekit import NODE, eventually, mock_host

from xpushare.codec import AGENT_MODE_KEY
from xpushare.node import KubeClient, NodeConfig
from xpushare.testing.apiserver import FakeApiServer
from xpushare.testing.claims import allocated_claim
from xpushare.testing.drakubelet import FakeDraKubelet
from xpushare.testing.nodeagent import run_node_agent, short_socket_dir

DRIVER = "mock.xpushare.io"


def claim_reads(api):
    return sum(1 for r in api.requests if r.resource == "resourceclaims" and r.method == "GET")


def dra_config(root, sockets):
    return dict(
        mode="dra",
        plugins_registry_dir=sockets / "registry",
        dra_plugins_dir=sockets / "plugins",
        cdi_dir=root / "cdi",
        state_dir=root / "state",
    )


async def test_slice_claim_prepare_restart_unprepare(tmp_path):
    with short_socket_dir("xda") as sockets:
        async with FakeApiServer() as api:
            api.put("nodes", {"metadata": {"name": NODE, "uid": "node-uid"}})
            kubelet = FakeDraKubelet(sockets / "registry")
            await kubelet.start()
            config = dra_config(tmp_path, sockets)
            try:
                client = KubeClient.for_host(NODE, api.url)
                async with run_node_agent(
                    mock_host("4x A100-80GB"), client, sockets, **config
                ) as run:
                    await kubelet.wait_registered(DRIVER)
                    await eventually(lambda: api.items("resourceslices"), "slices published")
                    (slice_obj,) = api.items("resourceslices")
                    ApiClient()._ApiClient__deserialize(slice_obj, "V1ResourceSlice")
                    assert len(slice_obj["spec"]["devices"]) == 4
                    await eventually(lambda: run.agent.readiness() == [], "ready")
                    # The extender reads the mode: a bind here writes no handoff.
                    annotations = api.get("nodes", NODE)["metadata"]["annotations"]
                    assert annotations[AGENT_MODE_KEY] == "dra"
                    claim = allocated_claim(
                        slice_obj, slice_obj["spec"]["devices"][2]["name"], memory="8Gi", cores="30"
                    )
                    ApiClient()._ApiClient__deserialize(claim, "ResourceV1ResourceClaim")
                    api.put("resourceclaims", claim)
                    uid = claim["metadata"]["uid"]
                    ref = ("ml", "train", uid)
                    answer = await kubelet.prepare(DRIVER, [ref])
                    assert answer[uid].error == ""
                    (device,) = answer[uid].devices
                    assert (
                        device["share_id"]
                        == claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
                    )
                client.close()

                (spec_file,) = (tmp_path / "cdi").glob("*.json")
                spec = json.loads(spec_file.read_text())
                (cdi,) = spec["devices"]
                assert device["cdi_device_ids"] == [f"{spec['kind']}={cdi['name']}"]
                env = dict(e.split("=", 1) for e in cdi["containerEdits"]["env"])
                gpu = slice_obj["spec"]["devices"][2]["attributes"]["uuid"]["string"]
                assert env == {
                    "XPUSHARE_MOCK_VISIBLE_DEVICES": gpu,
                    "XPUSHARE_MOCK_MEMORY_LIMIT_0": "8192m",
                    "XPUSHARE_MOCK_CORE_LIMIT_0": "30",
                }

                # The agent restarts (a DaemonSet update), and so does kubelet.
                kubelet.forget()
                client = KubeClient.for_host(NODE, api.url)
                host = mock_host("4x A100-80GB")
                async with run_node_agent(host, client, sockets, **config):
                    await kubelet.wait_registered(DRIVER)
                    reads = claim_reads(api)
                    again = await kubelet.prepare(DRIVER, [ref])
                    assert again[uid].devices == answer[uid].devices
                    # Answered from the checkpoint: a new preparation would read the claim.
                    assert claim_reads(api) == reads, "prepared again after the restart"
                    gone = await kubelet.unprepare(DRIVER, [ref])
                    assert gone[uid].error == ""
                    assert list((tmp_path / "cdi").glob("*.json")) == []
                    assert list((tmp_path / "state" / "dra" / "mock").glob("*.json")) == []
                client.close()
            finally:
                await kubelet.stop()


async def test_a_relative_plugins_dir_is_served_at_its_absolute_path(tmp_path, monkeypatch):
    # `--dra-plugins-dir plug` once made the agent bind "unix://plug/...", which gRPC reads as
    # a host name ("plug") and refuses, killing the agent. The working directory is the one
    # thing a relative path is relative to, so the test sets it (no internals are touched).
    with short_socket_dir("xdr") as sockets:
        monkeypatch.chdir(sockets)
        async with FakeApiServer() as api:
            api.put("nodes", {"metadata": {"name": NODE, "uid": "node-uid"}})
            kubelet = FakeDraKubelet(sockets / "registry")
            await kubelet.start()
            config = {**dra_config(tmp_path, sockets), "dra_plugins_dir": Path("plug")}
            try:
                client = KubeClient.for_host(NODE, api.url)
                async with run_node_agent(mock_host("1x A100-80GB"), client, sockets, **config):
                    await kubelet.wait_registered(DRIVER)
                    await eventually(lambda: api.items("resourceslices"), "slices published")
                    assert (sockets / "plug" / DRIVER / "dra.sock").is_socket()
                client.close()
            finally:
                await kubelet.stop()


def test_node_paths_are_made_absolute():
    config = NodeConfig(node_name=NODE, dra_plugins_dir=Path("plug"), cdi_dir=Path("cdi"))
    assert config.dra_plugins_dir == Path.cwd() / "plug"
    assert config.cdi_dir == Path.cwd() / "cdi"

"""The whole pod flow with Cambricon MLUs on the fake libcndev.so.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the Cambricon inventory it detected through
the plugin, and the fake kubelet admitting the pods over the device-plugin gRPC API: a pod
asking for a share in HAMi's units gets an sMLU instance made with its quota on the chosen
card, a whole-card pod gets the other card's nodes, and a share of two cards is refused at
admission.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cambricon_fakes import card_line

import xpushare_cambricon.plugin as cambricon_plugin
from xpushare.node import NodeAgent, NodeConfig
from xpushare.node.kube import KubeClient
from xpushare.node.tasks import TaskFailed
from xpushare.plugins import PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.scheduler import Scheduler, load_config
from xpushare.scheduler.kube import Kube, KubeSettings
from xpushare.testing.apiserver import FakeApiServer, json_patch, node, pod
from xpushare.testing.kubelet import ContainerSpec, FakeKubelet

NODE = "node-a"
MLU = "cambricon.com/vmlu"
MEM = "cambricon.com/mlu.smlu.vmemory"
CORE = "cambricon.com/mlu.smlu.vcore"


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # Not tmp_path: a unix socket path has at most 107 bytes and pytest's are long.
    path = Path(tempfile.mkdtemp(prefix="xpcam", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def api() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer() as server:
        yield server


def _host(**vendor_config: Any) -> PluginHost:
    host = PluginHost(
        core_plugins=CORE_PLUGINS, node_name=NODE, vendor_config={"cambricon": vendor_config}
    )
    record = host.register("cambricon", cambricon_plugin, distribution="xpushare-cambricon")
    assert record.error is None, record.error
    return host


async def _review(http: aiohttp.ClientSession, url: str, obj: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "review-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "default",
            "object": obj,
        },
    }
    async with http.post(f"{url}/mutate", json=body) as response:
        assert response.status == 200, await response.text()
        answer: dict[str, Any] = (await response.json())["response"]
    return answer


async def _post(http: aiohttp.ClientSession, url: str, verb: str, body: Any) -> Any:
    async with http.post(f"{url}/{verb}", json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def _schedule(
    http: aiohttp.ClientSession, url: str, api: FakeApiServer, wanted: dict[str, Any]
) -> dict[str, Any]:
    answer = await _review(http, url, wanted)
    assert answer["allowed"], answer
    patch = json.loads(base64.b64decode(answer.get("patch", "W10=")))
    created = api.put("pods", json_patch(wanted, patch))
    filtered = await _post(
        http, url, "filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]}
    )
    assert filtered["NodeNames"] == [NODE], filtered
    meta = created["metadata"]
    bound = await _post(
        http,
        url,
        "bind",
        {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": NODE},
    )
    assert not bound.get("Error"), bound
    return created


async def test_cambricon_pods_go_from_the_webhook_to_the_kubelet(
    api: FakeApiServer, plugin_dir: Path, table, fake_lib: Path, tmp_path: Path
) -> None:
    table.cards(card_line(0), card_line(1))
    api.put("nodes", node(NODE))
    node_host = _host(library_path=str(fake_lib), sysfs_root=str(tmp_path / "sys"))
    kubelet = FakeKubelet(plugin_dir, dial_timeout_s=2.0)
    await kubelet.start()
    config = NodeConfig(
        node_name=NODE,
        device_plugin_dir=plugin_dir,
        metrics_host="127.0.0.1",
        metrics_port=0,
        detect_interval_s=30.0,
        monitor_interval_s=0.05,
        health_interval_s=0.05,
        health_wait_s=0.01,
        reconcile_interval_s=30.0,
        socket_poll_s=0.01,
        register_retry_s=0.01,
        register_timeout_s=2.0,
        allocate_deadline_s=2.0,
        partition_lock_path=None,
    )
    agent = NodeAgent(config, node_host, KubeClient.for_host(NODE, api.url))
    agent_task = asyncio.create_task(agent.run())
    sched_kube = await Kube.connect(KubeSettings(server=api.url))
    settings = {
        "server.host": "127.0.0.1",
        "server.port": 0,
        "server.metrics_port": 0,
        "leader.enabled": False,
        "bind.wait_s": 3.0,
        "bind.repair_interval_s": 0.05,
    }
    scheduler = Scheduler(
        load_config(environ={}, overrides=settings), host=_host(), kube=sched_kube
    )
    try:
        await kubelet.wait_until(
            lambda: kubelet.registered(MLU) and kubelet.updates(MLU) > 0,
            what=f"{MLU} registered and listed",
        )
        await api.wait_for(
            lambda: (
                "xpushare.io/inventory-cambricon"
                in (api.get("nodes", NODE) or {})["metadata"].get("annotations", {})
            ),
            5.0,
        )
        await scheduler.start()
        await scheduler.wait_synced(10)
        url = f"http://127.0.0.1:{scheduler.ports['main']}"
        async with aiohttp.ClientSession() as http:
            refused = await _review(
                http, url, pod("wide", limits={MLU: "2", MEM: "16", CORE: "50"})
            )
            assert not refused["allowed"]
            assert "a share is part of one MLU" in refused["status"]["message"]

            # 16 units of 256 MiB and a quarter of the card's compute.
            share = await _schedule(
                http,
                url,
                api,
                pod(
                    "infer",
                    limits={MLU: "1", MEM: "16", CORE: "25"},
                    annotations={
                        "cambricon.com/use-gpuuuid": "MLU-01001012-1916-0000-0000-000000000000"
                    },
                ),
            )
            admitted = await kubelet.admit_pod(
                share["metadata"]["uid"], [ContainerSpec("main", {MLU: 1})]
            )
            first = admitted["main"]
            assert first.device_specs["/dev/cambricon_dev1"] == ("/dev/cambricon_dev1", "rw")
            assert "/dev/cambricon-caps/cap_dev1_mi1" in first.device_specs
            assert "/dev/cambricon_dev0" not in first.device_specs
            assert table.lines("profile") == [f"profile card=1 id=0 quota=25 mem={4096 << 20}"]

            # One node's handoff serves one pod at a time: bind the next after Allocate.
            whole = await _schedule(http, url, api, pod("train", limits={MLU: "1"}))
            admitted = await kubelet.admit_pod(
                whole["metadata"]["uid"], [ContainerSpec("main", {MLU: 1})]
            )
        second = admitted["main"]
        # The whole card is the one the share did not take.
        assert second.envs["CAMBRICON_VISIBLE_DEVICES"] == "0"
        assert second.device_specs["/dev/cambricon_dev0"] == ("/dev/cambricon_dev0", "rw")
        assert len(table.lines("instance")) == 1
    finally:
        await scheduler.stop()
        await sched_kube.close()
        await agent.stop()
        with contextlib.suppress(TaskFailed):
            await agent_task
        await kubelet.stop()
        node_host.close()

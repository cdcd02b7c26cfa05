"""The whole pod flow with Ascend NPUs on the fake libdcmi.so.

webhook -> /filter -> /bind in the real scheduler (the official kubernetes client against the
fake API server), the real node agent publishing the Ascend inventory it detected through the
plugin, and the fake kubelet admitting the pods over the device-plugin gRPC API: a vNPU pod
gets its chip and template for Ascend Docker Runtime, a whole-NPU pod gets the chip's device
nodes, and a pod no chip can hold is refused at admission with the templates listed.
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
from ascend_fakes import chip_line

import xpushare_ascend.plugin as ascend_plugin
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
NPU = "huawei.com/Ascend910B3"
MEM = "huawei.com/Ascend910B3-memory"


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # Not tmp_path: a unix socket path has at most 107 bytes and pytest's are long.
    path = Path(tempfile.mkdtemp(prefix="xpasc", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def api() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer() as server:
        yield server


def _host(**vendor_config: Any) -> PluginHost:
    host = PluginHost(
        core_plugins=CORE_PLUGINS, node_name=NODE, vendor_config={"ascend": vendor_config}
    )
    record = host.register("ascend", ascend_plugin, distribution="xpushare-ascend")
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


async def test_ascend_pods_go_from_the_webhook_to_the_kubelet(
    api: FakeApiServer, plugin_dir: Path, table, fake_lib: Path, tmp_path: Path
) -> None:
    table.chips(chip_line(0, phy=2), chip_line(1, phy=3))
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
            lambda: kubelet.registered(NPU) and kubelet.updates(NPU) > 0,
            what=f"{NPU} registered and listed",
        )
        await api.wait_for(
            lambda: (
                "xpushare.io/inventory-ascend"
                in (api.get("nodes", NODE) or {})["metadata"].get("annotations", {})
            ),
            5.0,
        )
        await scheduler.start()
        await scheduler.wait_synced(10)
        url = f"http://127.0.0.1:{scheduler.ports['main']}"
        async with aiohttp.ClientSession() as http:
            # No 910B3 can hold 70000 MiB: refused at admission, templates listed.
            refused = await _review(http, url, pod("huge", limits={NPU: "1", MEM: "70000"}))
            assert not refused["allowed"]
            message = refused["status"]["message"]
            assert "vir05_1c_16g (16384 MiB), vir10_3c_32g (32768 MiB)" in message

            vnpu = await _schedule(http, url, api, pod("infer", limits={NPU: "1", MEM: "12000"}))
            # The webhook wrote the template's size into the pod.
            limits = vnpu["spec"]["containers"][0]["resources"]["limits"]
            assert limits[MEM] == "16384"
            admitted = await kubelet.admit_pod(
                vnpu["metadata"]["uid"], [ContainerSpec("main", {NPU: 1})]
            )
            first = admitted["main"]
            assert first.envs["ASCEND_VNPU_SPECS"] == "vir05_1c_16g"
            vnpu_chip = first.envs["ASCEND_VISIBLE_DEVICES"]
            assert vnpu_chip in {"2", "3"}
            assert not any(p.startswith("/dev/davinci") for p in first.device_specs)

            # One node's handoff serves one pod at a time: bind the next after Allocate.
            whole = await _schedule(http, url, api, pod("train", limits={NPU: "1"}))
            admitted = await kubelet.admit_pod(
                whole["metadata"]["uid"], [ContainerSpec("main", {NPU: 1})]
            )
        second = admitted["main"]
        # The whole NPU is the chip the vNPU did not take.
        other = ({"2", "3"} - {vnpu_chip}).pop()
        assert second.envs["ASCEND_VISIBLE_DEVICES"] == other
        assert second.device_specs[f"/dev/davinci{other}"] == (f"/dev/davinci{other}", "rw")
        assert second.device_specs["/dev/davinci_manager"] == ("/dev/davinci_manager", "rw")
        assert "ASCEND_VNPU_SPECS" not in second.envs
    finally:
        await scheduler.stop()
        await sched_kube.close()
        await agent.stop()
        with contextlib.suppress(TaskFailed):
            await agent_task
        await kubelet.stop()
        node_host.close()

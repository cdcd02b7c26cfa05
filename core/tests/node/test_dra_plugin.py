"""The kubelet DRA plugin over real gRPC: registration, prepare to a CDI spec through the
vendor's allocate hook, unprepare through its release hook, checkpoints across restarts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import pytest
from nodekit import NODE
from vendors import Keeper

from xpushare import hookimpl
from xpushare.node import KubeClient
from xpushare.node.devices import VendorDevices
from xpushare.node.dra.checkpoint import Checkpoints, cdi_file_name
from xpushare.node.dra.plugin import DraPluginServer
from xpushare.node.dra.prepare import ClaimPreparer
from xpushare.node.dra.slices import device_name
from xpushare.testing.apiserver import FakeApiServer
from xpushare.testing.drakubelet import FakeDraKubelet
from xpushare.testing.hosts import vendor_host
from xpushare.testing.nodeagent import short_socket_dir

DRIVER = "keeper.xpushare.io"


def claim(name, results, uid=None, namespace="default"):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def result(device, request="gpu", memory="4Gi", cores="30", share=None, pool=NODE):
    entry = {"request": request, "driver": DRIVER, "pool": pool, "device": device_name(device)}
    if memory is not None or cores is not None:
        entry["consumedCapacity"] = {
            k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None
        }
    if share:
        entry["shareID"] = share
    return entry


class Rig:
    """A keeper vendor's DRA plugin, the fake API server and a fake kubelet, all real."""

    def __init__(self, root, sockets, keeper):
        self.root, self.sockets, self.keeper = root, sockets, keeper
        self.cdi = root / "cdi"
        self.state = root / "state"
        self.api = FakeApiServer()
        self.kubelet = FakeDraKubelet(sockets / "registry")
        self.task = None

    async def start_agent(self):
        # The old agent's entry stays until the kubelet's next scan: wait for a new one.
        before = self.kubelet.registrations
        self.host = vendor_host("keeper", self.keeper, node_name=NODE, strict=True)
        handle = self.host.vendors["keeper"]
        await handle.astartup()
        self.devices = VendorDevices("keeper")
        self.devices.set_detected(await handle.adetect())
        self.client = KubeClient.for_host(NODE, self.api.url)
        self.preparer = ClaimPreparer(
            kube=self.client,
            vendor="keeper",
            handle=handle,
            devices=self.devices,
            checkpoints=Checkpoints(self.state),
            cdi_dir=self.cdi,
            deadline_s=5.0,
        )
        self.server = DraPluginServer(
            self.preparer,
            plugins_dir=self.sockets / "plugins",
            registry_dir=self.sockets / "registry",
            poll_s=0.01,
        )
        self.task = asyncio.create_task(self.server.run())
        await self.kubelet.wait_registered(DRIVER, after=before)

    async def stop_agent(self):
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self.client.close()
        self.host.close()

    def cdi_spec(self, uid):
        return json.loads((self.cdi / cdi_file_name("keeper", uid)).read_text())


@pytest.fixture
async def rig(tmp_path):
    with short_socket_dir("xdr") as sockets:
        rig = Rig(tmp_path, sockets, Keeper(tmp_path / "made"))
        await rig.api.start()
        await rig.kubelet.start()
        await rig.start_agent()
        try:
            yield rig
        finally:
            await rig.stop_agent()
            await rig.kubelet.stop()
            await rig.api.stop()


async def test_registration_names_the_driver_and_its_socket(rig):
    assert rig.server.registered and rig.server.registrations == 1
    driver = rig.kubelet.drivers[DRIVER]
    assert driver.endpoint == str(rig.sockets / "plugins" / DRIVER / "dra.sock")
    assert driver.versions == ("v1.DRAPlugin",)
    # Removing the registration socket deregisters; the plugin serves it again.
    (rig.sockets / "registry" / f"{DRIVER}-reg.sock").unlink()
    await rig.kubelet.wait_until(lambda: rig.server.registrations == 2, "registered again")


async def test_prepare_gives_a_cdi_device_with_the_vendors_edits_and_unprepare_frees_it(rig):
    obj = claim("train", [result("KEEP-3", share="share-1")])
    rig.api.put("resourceclaims", obj)
    uid = obj["metadata"]["uid"]
    answer = await rig.kubelet.prepare(DRIVER, [("default", "train", uid)])
    assert answer[uid].error == ""
    (device,) = answer[uid].devices
    cdi_name = f"{uid}-gpu"
    assert device == {
        "request_names": ["gpu"],
        "pool_name": NODE,
        "device_name": "keep-3",
        "cdi_device_ids": [f"keeper.xpushare.io/claim={cdi_name}"],
        "share_id": "share-1",
    }
    (request,) = rig.keeper.allocations
    assert (request.pod.namespace, request.pod.name, request.pod.uid) == ("default", "train", uid)
    assert request.container == "gpu"
    (piece,) = request.slices
    assert (piece.device_id, piece.memory_mib, piece.compute_percent) == ("KEEP-3", 4096, 30)
    spec = rig.cdi_spec(uid)
    assert spec["kind"] == "keeper.xpushare.io/claim"
    made = rig.keeper.path(uid, "gpu")
    assert spec["devices"] == [{"name": cdi_name, "containerEdits": {"env": [f"KEEP_DIR={made}"]}}]
    assert made.is_dir()

    again = await rig.kubelet.prepare(DRIVER, [("default", "train", uid)])
    assert again[uid].devices == answer[uid].devices
    assert len(rig.keeper.allocations) == 1, "prepared twice"

    gone = await rig.kubelet.unprepare(DRIVER, [("default", "train", uid)])
    assert gone[uid].error == ""
    assert not made.exists() and rig.keeper.left() == []
    assert not (rig.cdi / cdi_file_name("keeper", uid)).exists()
    assert list(rig.state.glob("*.json")) == []
    twice = await rig.kubelet.unprepare(DRIVER, [("default", "train", uid)])
    assert twice[uid].error == "" and len(rig.keeper.releases) == 1


async def test_every_claim_gets_an_answer_and_bad_claims_name_the_field(rig):
    whole = claim(
        "whole",
        [result("KEEP-0", memory=None, cores=None), result("KEEP-1", memory=None, cores=None)],
    )
    other_pool = claim("moved", [result("KEEP-0", pool="node-b")])
    too_big = claim("big", [result("KEEP-2", memory="17Gi")])
    unknown = claim("unknown", [result("KEEP-99")])
    for obj in (whole, other_pool, too_big, unknown):
        rig.api.put("resourceclaims", obj)
    recreated = ("default", "whole", str(uuid.uuid4()))
    absent = ("default", "absent", str(uuid.uuid4()))
    refs = [
        ("default", o["metadata"]["name"], o["metadata"]["uid"])
        for o in (whole, other_pool, too_big, unknown)
    ]
    answer = await rig.kubelet.prepare(DRIVER, [*refs, recreated, absent])
    assert len(answer) == 6
    w = answer[whole["metadata"]["uid"]]
    assert w.error == "" and [d["device_name"] for d in w.devices] == ["keep-0", "keep-1"]
    slices = rig.keeper.allocations[0].slices
    assert [(s.memory_mib, s.exclusive) for s in slices] == [(16384, True), (16384, True)]
    assert "pool is 'node-b'" in answer[other_pool["metadata"]["uid"]].error
    assert "17408 MiB" in answer[too_big["metadata"]["uid"]].error
    assert "'keep-99' is not a keeper device" in answer[unknown["metadata"]["uid"]].error
    assert "re-created" in answer[recreated[2]].error
    assert "does not exist" in answer[absent[2]].error
    assert len(rig.keeper.allocations) == 1


async def test_an_agent_restart_neither_loses_nor_prepares_twice(rig):
    obj = claim("train", [result("KEEP-5")])
    rig.api.put("resourceclaims", obj)
    uid = obj["metadata"]["uid"]
    ref = ("default", "train", uid)
    first = await rig.kubelet.prepare(DRIVER, [ref])
    await rig.stop_agent()
    (rig.cdi / cdi_file_name("keeper", uid)).unlink()  # a tmpfs CDI directory after a reboot
    rig.kubelet.forget()
    await rig.start_agent()
    again = await rig.kubelet.prepare(DRIVER, [ref])
    assert again[uid].devices == first[uid].devices
    assert len(rig.keeper.allocations) == 1
    assert rig.cdi_spec(uid)["devices"][0]["name"] == f"{uid}-gpu"
    await rig.kubelet.unprepare(DRIVER, [ref])
    assert rig.keeper.left() == [] and len(rig.keeper.releases) == 1


class FlakyKeeper(Keeper):
    """The keeper, whose allocate fails for the requests named in ``fail``."""

    def __init__(self, root):
        super().__init__(root)
        self.fail: set[str] = set()

    @hookimpl
    def xpushare_allocate(self, ctx, request):
        if request.container in self.fail:
            raise RuntimeError(f"keeper: device busy for request {request.container}")
        return super().xpushare_allocate(ctx, request)


async def test_a_prepare_cut_short_is_released_before_it_is_prepared_again(rig):
    await rig.stop_agent()
    rig.keeper = FlakyKeeper(rig.root / "flaky")
    await rig.start_agent()
    obj = claim("train", [result("KEEP-1", request="a"), result("KEEP-2", request="b")])
    rig.api.put("resourceclaims", obj)
    uid = obj["metadata"]["uid"]
    ref = ("default", "train", uid)
    rig.keeper.fail = {"b"}
    failed = await rig.kubelet.prepare(DRIVER, [ref])
    assert "device busy for request b" in failed[uid].error
    assert "keeper could not prepare request 'b' on KEEP-2" in failed[uid].error
    assert rig.keeper.left() == [f"{uid}/a"]
    assert not (rig.cdi / cdi_file_name("keeper", uid)).exists()
    rig.keeper.fail = set()
    ok = await rig.kubelet.prepare(DRIVER, [ref])
    assert ok[uid].error == ""
    # What the first try made was released before the second made both again.
    assert len(rig.keeper.releases) == 1
    assert [r.container for r in rig.keeper.allocations] == ["a", "a", "b"]
    assert rig.keeper.left() == [f"{uid}/a", f"{uid}/b"]


async def _health_stream(rig):
    import grpc

    from xpushare.node.dra.health import health, health_grpc

    channel = grpc.aio.insecure_channel(f"unix://{rig.server.dra_socket}")
    stub = health_grpc.DRAResourceHealthStub(channel)
    return channel, stub.NodeWatchResources(health.NodeWatchResourcesRequest())


async def test_the_health_stream_reports_every_device_then_each_change(rig):
    from xpushare.models import HealthEvent
    from xpushare.node.dra.health import HEALTH_TIMEOUT_S, health

    channel, stream = await _health_stream(rig)
    try:
        first = await asyncio.wait_for(stream.read(), 5)
        names = {device_name(d.id) for d in rig.devices.view.devices}
        assert {d.device.device_name for d in first.devices} == names
        assert {d.device.pool_name for d in first.devices} == {NODE}  # the pool our slices use
        assert {d.health for d in first.devices} == {health.HEALTHY}
        assert {d.health_check_timeout_seconds for d in first.devices} == {HEALTH_TIMEOUT_S}
        assert rig.server.health.streams == 1

        rig.devices.apply_health([HealthEvent(device_id="KEEP-3", healthy=False, reason="xid 79")])
        second = await asyncio.wait_for(stream.read(), 5)
        by_name = {d.device.device_name: d for d in second.devices}
        assert by_name[device_name("KEEP-3")].health == health.UNHEALTHY
        assert by_name[device_name("KEEP-3")].message == "xid 79"
        assert by_name[device_name("KEEP-0")].health == health.HEALTHY
        assert by_name[device_name("KEEP-0")].message == ""
    finally:
        stream.cancel()
        await channel.close()


async def test_the_health_stream_repeats_its_report_before_kubelet_would_call_it_unknown(
    rig, monkeypatch
):
    from xpushare.node.dra import health as module

    # kubelet calls a device Unknown when no report came within its timeout: the report is
    # sent again well within it while nothing changes.
    assert module.RESEND_S * 2 < module.HEALTH_TIMEOUT_S
    monkeypatch.setattr(module, "RESEND_S", 0.05)
    channel, stream = await _health_stream(rig)
    try:
        first = await asyncio.wait_for(stream.read(), 5)
        again = await asyncio.wait_for(stream.read(), 5)
        assert [(d.device, d.health) for d in again.devices] == [
            (d.device, d.health) for d in first.devices
        ]
    finally:
        stream.cancel()
        await channel.close()
    # A stream kubelet closed is forgotten.
    for _ in range(100):
        if rig.server.health.streams == 0:
            break
        await asyncio.sleep(0.02)
    assert rig.server.health.streams == 0


def test_a_report_names_the_devices_as_our_slices_do_and_cuts_long_reasons():
    from xpushare.models import Device
    from xpushare.node.devices import DeviceView
    from xpushare.node.dra.health import MAX_MESSAGE, health, report
    from xpushare.node.dra.slices import pool_devices

    devices = tuple(
        Device(
            vendor="keeper",
            id=f"GPU-{i}/mig 1g",
            index=i,
            model="Keep K1",
            memory_mib=1024,
            healthy=i != 1,
        )
        for i in range(2)
    )
    view = DeviceView(
        version=1,
        state="ok",
        message="",
        devices=devices,
        kubelet_devices=(),
        unhealthy_reasons={"GPU-1/mig 1g": "x" * 5000},
    )
    answer = report(view, "node-a", now=1_700_000_000)
    assert [d.device.device_name for d in answer.devices] == [e["name"] for e in pool_devices(view)]
    assert [d.health for d in answer.devices] == [health.HEALTHY, health.UNHEALTHY]
    assert len(answer.devices[1].message) == MAX_MESSAGE
    assert {d.last_updated_time for d in answer.devices} == {1_700_000_000}

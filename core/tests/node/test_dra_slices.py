"""ResourceSlices: built from the devices, published through the agent's real client into the
fake API server, read back through the official client's resource.k8s.io/v1 models."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes.client import ApiClient

from xpushare.models import Device, HealthEvent, LinkKind, TopologyLink
from xpushare.node import KubeClient
from xpushare.node.devices import VendorDevices
from xpushare.node.dra.publisher import SlicePublisher, remove_foreign_slices
from xpushare.node.dra.slices import (
    DEVICES_PER_SLICE,
    UNHEALTHY_TAINT,
    device_name,
    islands,
)
from xpushare.testing.apiserver import FakeApiServer

NODE = "node-a"
DRIVER = "acme.xpushare.io"


def gpu(i: int, **extra) -> Device:
    fields = dict(
        vendor="acme",
        id=f"GPU-{i:04d}-AB",
        index=i,
        model="Acme A100-SXM4-80GB",
        memory_mib=81920,
        compute_units=108,
        share_slots=4,
        numa_node=i // 4,
        pci_bus_id=f"0000:{i + 16:02X}:00.0",
        extra={"cc": "8.0", "not an id!": "x"},
    )
    fields.update(extra)
    return Device(**fields)


def parsed(obj):
    """The object through the official client's model (fails on a shape the API lacks)."""
    return ApiClient()._ApiClient__deserialize(obj, "V1ResourceSlice")


def node_object(uid="node-uid-1"):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": uid}}


def ours(api: FakeApiServer):
    return sorted(api.items("resourceslices"), key=lambda s: s["metadata"]["name"])


async def publisher_for(api, devices, vendor="acme"):
    client = KubeClient.for_host(NODE, api.url)
    return client, SlicePublisher(client, vendor, devices, interval_s=30.0)


def test_device_names_are_dns_labels_stable_and_distinct():
    assert device_name("GPU-8f3c0a1e-aaaa") == "gpu-8f3c0a1e-aaaa"
    odd = [device_name("MLU_0"), device_name("MLU.0"), device_name("x" * 80)]
    assert len(set(odd)) == 3
    for name in odd:
        assert len(name) <= 63 and name == name.lower() and name[0].isalnum()
    assert device_name("MLU_0") == device_name("MLU_0")


def test_islands_join_nvlinked_devices_only():
    a = gpu(0, links=(TopologyLink(peer="GPU-0001-AB", kind=LinkKind.NVLINK, count=12),))
    b = gpu(1)
    c = gpu(2, links=(TopologyLink(peer="GPU-0003-AB", kind=LinkKind.PCIE_SWITCH),))
    d = gpu(3)
    assert islands([d, c, b, a]) == {
        "GPU-0000-AB": 0,
        "GPU-0001-AB": 0,
        "GPU-0002-AB": 2,
        "GPU-0003-AB": 3,
    }


async def test_publishes_a_pool_the_official_models_read():
    devices = VendorDevices("acme")
    linked = (TopologyLink(peer="GPU-0001-AB", kind=LinkKind.NVLINK),)
    devices.set_detected([gpu(0, links=linked), gpu(1)])
    async with FakeApiServer() as api:
        api.put("nodes", node_object())
        client, publisher = await publisher_for(api, devices)
        try:
            await publisher.reconcile(devices.view)
        finally:
            client.close()
        (obj,) = ours(api)
    model = parsed(obj)
    assert model.spec.driver == DRIVER and model.spec.node_name == NODE
    assert model.spec.pool.name == NODE and model.spec.pool.resource_slice_count == 1
    assert model.spec.pool.generation == 1
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "node-uid-1"
    first = model.spec.devices[0]
    assert first.name == "gpu-0000-ab" and first.allow_multiple_allocations is True
    attrs = first.attributes
    assert attrs["uuid"].string == "GPU-0000-AB" and attrs["index"].int == 0
    assert attrs["resource.kubernetes.io/numaNode"].int == 0
    assert attrs["resource.kubernetes.io/pciBusID"].string == "0000:10:00.0"
    assert attrs["cc"].string == "8.0" and "not an id!" not in attrs
    assert attrs["linkIsland"].int == 0
    assert model.spec.devices[1].attributes["linkIsland"].int == 0
    memory = first.capacity["memory"]
    assert memory.value == "81920Mi" and memory.request_policy.default == "81920Mi"
    assert memory.request_policy.valid_range.step == "1Mi"
    assert first.capacity["cores"].request_policy.valid_range.max == "100"
    assert first.capacity["shares"].value == "4"
    assert first.capacity["shares"].request_policy.valid_values == ["1"]
    assert not first.taints


async def test_redetection_health_and_departure_follow_the_devices():
    devices = VendorDevices("acme")
    devices.set_detected([gpu(0), gpu(1)])
    async with FakeApiServer() as api:
        api.put("nodes", node_object())
        client, publisher = await publisher_for(api, devices)
        try:
            await publisher.reconcile(devices.view)
            writes = len(api.writes("resourceslices"))
            await publisher.reconcile(devices.view)
            assert len(api.writes("resourceslices")) == writes, "unchanged devices rewritten"

            devices.apply_health(
                [HealthEvent(device_id="GPU-0001-AB", healthy=False, reason="XID 79")]
            )
            await publisher.reconcile(devices.view)
            (obj,) = ours(api)
            assert obj["spec"]["pool"]["generation"] == 2
            taints = {d["name"]: d.get("taints") for d in obj["spec"]["devices"]}
            assert taints["gpu-0000-ab"] is None
            assert taints["gpu-0001-ab"] == [
                {"key": UNHEALTHY_TAINT, "value": "XID-79", "effect": "NoSchedule"}
            ]
            parsed(obj)

            devices.set_detected([gpu(i) for i in range(DEVICES_PER_SLICE + 3)])
            await publisher.reconcile(devices.view)
            slices = ours(api)
            assert len(slices) == 2
            assert {s["spec"]["pool"]["generation"] for s in slices} == {3}
            assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}
            assert sum(len(s["spec"]["devices"]) for s in slices) == DEVICES_PER_SLICE + 3

            devices.set_detected([gpu(0)])
            await publisher.reconcile(devices.view)
            (obj,) = ours(api)
            assert obj["spec"]["pool"]["generation"] == 4
            assert [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0000-ab"]

            devices.set_gone("driver unloaded")
            await publisher.reconcile(devices.view)
            assert ours(api) == []
        finally:
            client.close()


async def test_a_restarted_agent_writes_above_every_generation_seen_and_repairs_deletions():
    devices = VendorDevices("acme")
    devices.set_detected([gpu(0)])
    async with FakeApiServer() as api:
        api.put("nodes", node_object())
        client, first = await publisher_for(api, devices)
        try:
            for _ in range(3):
                devices.apply_health([HealthEvent(device_id="GPU-0000-AB", healthy=_ % 2 == 1)])
                await first.reconcile(devices.view)
            assert ours(api)[0]["spec"]["pool"]["generation"] == 3
            _, second = await publisher_for(api, devices)
            await second.reconcile(devices.view)
            assert ours(api)[0]["spec"]["pool"]["generation"] == 4
            # kubelet wipes the node's slices when it starts: the next pass puts them back.
            api.delete("resourceslices", ours(api)[0]["metadata"]["name"])
            await second.reconcile(devices.view)
            assert ours(api)[0]["spec"]["pool"]["generation"] == 5
        finally:
            client.close()


async def test_run_follows_changes_and_survives_api_errors():
    devices = VendorDevices("acme")
    devices.set_detected([gpu(0)])
    async with FakeApiServer() as api:
        api.put("nodes", node_object())
        api.inject("POST", r"/resourceslices$", status=500, times=2)
        client, publisher = await publisher_for(api, devices)
        task = asyncio.create_task(publisher.run())
        try:
            async with asyncio.timeout(20):
                while not ours(api):
                    await asyncio.sleep(0.01)
                devices.set_detected([gpu(0), gpu(1)])
                while len(ours(api)[0]["spec"]["devices"]) != 2:
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            client.close()


async def test_deleted_slices_are_published_again_without_waiting_for_the_next_pass():
    # kubelet deletes the node's slices when it starts. The passes are an hour apart here, so
    # only the watch of our slices can bring them back before the test's bound.
    devices = VendorDevices("acme")
    devices.set_detected([gpu(0)])
    async with FakeApiServer() as api:
        api.put("nodes", node_object())
        client = KubeClient.for_host(NODE, api.url)
        publisher = SlicePublisher(client, "acme", devices, interval_s=3600.0)
        task = asyncio.create_task(publisher.run())
        try:
            async with asyncio.timeout(20):
                while not ours(api):
                    await asyncio.sleep(0.01)
                for _ in range(2):  # twice: the watch goes on after the first repair
                    before = ours(api)[0]["spec"]["pool"]["generation"]
                    api.delete("resourceslices", ours(api)[0]["metadata"]["name"])
                    while not ours(api):
                        await asyncio.sleep(0.01)
                    assert ours(api)[0]["spec"]["pool"]["generation"] > before
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            client.close()


async def test_without_device_taints_an_unhealthy_device_leaves_the_pool():
    # An API server without DRADeviceTaints (before 1.36) drops the taints field: the device
    # would look healthy to kube-scheduler. The publisher sees its taint gone from the stored
    # slice and leaves the device out until it is healthy again.
    devices = VendorDevices("acme")
    devices.set_detected([gpu(0), gpu(1)])
    dropped = {"resourceslices": ["spec.devices[].taints"]}
    async with FakeApiServer(dropped_fields=dropped) as api:
        api.put("nodes", node_object())
        client, publisher = await publisher_for(api, devices)
        try:
            await publisher.reconcile(devices.view)
            assert publisher.taints_kept  # nothing tainted was written yet
            devices.apply_health([HealthEvent(device_id="GPU-0001-AB", healthy=False)])
            await publisher.reconcile(devices.view)
            assert not publisher.taints_kept
            await publisher.reconcile(devices.view)
            (obj,) = ours(api)
            assert [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0000-ab"]
            devices.apply_health([HealthEvent(device_id="GPU-0001-AB", healthy=True)])
            await publisher.reconcile(devices.view)
            (obj,) = ours(api)
            assert [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0000-ab", "gpu-0001-ab"]
        finally:
            client.close()


async def test_the_node_and_a_vendor_going_away_take_our_slices_only():
    devices = VendorDevices("acme")
    devices.set_detected([gpu(0)])
    async with FakeApiServer() as api:
        api.put("nodes", node_object())
        foreign = {
            "metadata": {"name": "someone-elses", "labels": {"xpushare.io/vendor": "gone"}},
            "spec": {"driver": "gpu.example.com", "nodeName": NODE, "pool": {"name": NODE}},
        }
        retired = {
            "metadata": {"name": "retired", "labels": {"xpushare.io/vendor": "gone"}},
            "spec": {"driver": "gone.xpushare.io", "nodeName": NODE, "pool": {"name": NODE}},
        }
        api.put("resourceslices", foreign)
        api.put("resourceslices", retired)
        client, publisher = await publisher_for(api, devices)
        try:
            assert await remove_foreign_slices(client, ["acme"]) == ["retired"]
            await publisher.reconcile(devices.view)
        finally:
            client.close()
        names = {s["metadata"]["name"] for s in ours(api)}
        assert names == {"someone-elses", "node-a-acme-xpushare-0"}
        api.delete("nodes", NODE)
        assert {s["metadata"]["name"] for s in ours(api)} == {"someone-elses"}

"""Health events in ListAndWatch; inventory annotations and labels kept current."""

import time

import yaml
from nodekit import NODE, RESOURCE, eventually, mock_host, running
from vendors import Acme

from xpushare.codec import HANDOFF_KEY, Handoff, decode_inventory, encode_handoff
from xpushare.models import PodRef

LONG_MODEL = "NVIDIA A100-SXM4-80GB (rev a1) with a product name far longer than any label value"


def write_devices(path, healthy=(True, True, True), model="A100-80GB"):
    entries = [
        {"model": model, "memory_mib": 81920, "count": 1, "healthy": h, "share_slots": 2}
        for h in healthy
    ]
    path.write_text(yaml.safe_dump({"devices": entries}))


def health(kubelet, device):
    return {v for k, v in kubelet.devices(RESOURCE).items() if k.startswith(device + "::")}


async def test_health_events_mark_devices_unhealthy_and_healthy_again(plugin_dir, tmp_path):
    spec = tmp_path / "devices.yaml"
    write_devices(spec)
    async with running(plugin_dir, host=mock_host(str(spec))) as run:
        kubelet = run.kubelet
        assert kubelet.allocatable(RESOURCE) == 6
        write_devices(spec, healthy=(True, False, True))
        await kubelet.wait_until(lambda: health(kubelet, f"MOCK-{NODE}-1") == {"Unhealthy"})
        assert health(kubelet, f"MOCK-{NODE}-0") == {"Healthy"}
        assert kubelet.capacity(RESOURCE) == 6 and kubelet.allocatable(RESOURCE) == 4
        # The inventory the scheduler reads says so too.
        key = "xpushare.io/inventory-mock"
        await eventually(
            lambda: not decode_inventory(key, run.kube.annotations[key]).devices[1].healthy,
            "unhealthy in the inventory",
        )
        write_devices(spec)
        await kubelet.wait_until(lambda: kubelet.allocatable(RESOURCE) == 6, what="recovered")


async def test_inventory_and_labels_are_published_and_restored(plugin_dir, tmp_path):
    spec = tmp_path / "devices.yaml"
    write_devices(spec, model=LONG_MODEL)
    async with running(plugin_dir, host=mock_host(str(spec)), reconcile_interval_s=0.02) as run:
        key = "xpushare.io/inventory-mock"
        await eventually(lambda: key in run.kube.annotations, "inventory published")
        inventory = decode_inventory(key, run.kube.annotations[key])
        assert inventory.state == "ok" and inventory.node == NODE
        assert [d.id for d in inventory.devices] == [f"MOCK-{NODE}-{i}" for i in range(3)]
        labels = run.kube.labels
        assert labels["xpushare.io/mock.present"] == "true"
        assert labels["xpushare.io/mock.count"] == "3"
        assert labels["xpushare.io/mock.memory-mib"] == "81920"
        product = labels["xpushare.io/mock.product"]
        assert len(product) <= 63 and product.startswith("NVIDIA-A100-SXM4-80GB-rev-a1-with")
        assert product[-1].isalnum()
        # Someone deletes them: they come back.
        run.kube.node["metadata"]["annotations"].pop(key)
        run.kube.node["metadata"]["labels"].pop("xpushare.io/mock.count")
        await eventually(
            lambda: key in run.kube.annotations and "xpushare.io/mock.count" in run.kube.labels,
            "annotation and label restored",
        )


async def test_no_devices_error_and_inactive_are_told_apart(plugin_dir):
    empty = Acme("empty", devices=0)
    flaky = Acme("flaky", devices=2)
    host = mock_host("", ("empty", empty), ("flaky", flaky))  # mock: no devices configured
    async with running(plugin_dir, host=host, wait_for=flaky.resource) as run:
        annotations = run.kube.annotations
        await eventually(lambda: "xpushare.io/inventory-empty" in run.kube.annotations, "published")
        annotations = run.kube.annotations
        # The mock is inactive: no inventory at all, and the reason is kept for operators.
        assert "xpushare.io/inventory-mock" not in annotations
        assert run.agent.devices["mock"].state == "inactive"
        assert "XPUSHARE_MOCK_DEVICES" in run.agent.devices["mock"].view.message
        empty_inv = decode_inventory(
            "xpushare.io/inventory-empty", annotations["xpushare.io/inventory-empty"]
        )
        assert empty_inv.state == "no-devices" and empty_inv.devices == ()
        assert "xpushare.io/empty.present" not in run.kube.labels
        # Detection fails after a good one: state error, the last devices are kept.
        flaky.fail_detect = True
        run.agent.rescan("flaky")
        key = "xpushare.io/inventory-flaky"

        def failed():
            inv = decode_inventory(key, run.kube.annotations[key])
            return inv.state == "error"

        await eventually(failed, "error state published")
        inv = decode_inventory(key, run.kube.annotations[key])
        assert len(inv.devices) == 2
        assert "ACME_ERROR_UNKNOWN" in inv.message
        assert run.kube.labels["xpushare.io/flaky.count"] == "2"
        assert run.kubelet.allocatable(flaky.resource) == 20  # still served
        # An inactive vendor does not hold readiness back.
        assert run.agent.readiness() == []


async def test_keys_of_vendors_no_longer_installed_are_removed(plugin_dir):
    from xpushare.testing.kube import InMemoryKube

    kube = InMemoryKube(NODE, labels={"xpushare.io/gone.count": "4", "team": "ml"})
    kube.node["metadata"]["annotations"]["xpushare.io/inventory-gone"] = "{}"
    kube.node["metadata"]["annotations"]["other.io/keep"] = "yes"
    async with running(plugin_dir, kube=kube) as run:
        await eventually(
            lambda: "xpushare.io/inventory-gone" not in run.kube.annotations, "stale removed"
        )
        assert "xpushare.io/gone.count" not in run.kube.labels
        assert run.kube.labels["team"] == "ml"
        assert run.kube.annotations["other.io/keep"] == "yes"


async def test_the_inventory_pass_never_writes_the_handoff_lease(plugin_dir):
    # An expired handoff is free to the scheduler and ignored by Allocate: it stays as it is
    # until the scheduler's next bind replaces it; the agent's account cannot write Leases.
    from xpushare.testing.kube import InMemoryKube

    kube = InMemoryKube(NODE)
    old = Handoff.begin(PodRef(name="ghost", uid="u1"), ["mock"], now=time.time() - 120, ttl_s=30)
    kube.set_handoff_annotations({HANDOFF_KEY: encode_handoff(old)})
    async with running(plugin_dir, kube=kube, reconcile_interval_s=0.02) as run:
        await eventually(lambda: run.agent.publisher.published > 3, "passes")
        assert run.kube.handoff_annotations[HANDOFF_KEY] == encode_handoff(old)
        assert not [p for p in run.kube.patches if HANDOFF_KEY in str(p)]

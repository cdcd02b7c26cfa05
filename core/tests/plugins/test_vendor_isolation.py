"""One vendor's exception or bad output never reaches another; node hooks run on its thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from xpushare import PluginError, VendorUnavailable, hookimpl
from xpushare.models import (
    AdmissionGuard,
    AllocateRequest,
    ContainerRequest,
    ContainerView,
    Device,
    DeviceSlice,
    FitResult,
    JsonPatchOp,
    NodeView,
    PodAssignment,
    PodRef,
    PodView,
    VendorSpec,
)
from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.testing.stubs import StubVendor as Vendor
from xpushare.testing.stubs import stub_spec


class Broken(Vendor):
    """Every hook misbehaves: raises, or returns something of the wrong shape."""

    @hookimpl
    def xpushare_fit(self) -> Any:
        raise RuntimeError("boom in fit")

    @hookimpl
    def xpushare_score(self) -> Any:
        return 7.5

    @hookimpl
    def xpushare_detect(self) -> Any:
        return [{"vendor": "broken", "id": "x"}]

    @hookimpl
    def xpushare_patch_annotations(self) -> Any:
        return {"xpushare.io/assignment": "mine"}

    @hookimpl
    def xpushare_mutate_admission(self) -> Any:
        return [{"op": "explode", "path": "/spec"}]

    @hookimpl
    def xpushare_resource_request(self) -> Any:
        return ContainerRequest(vendor="someone-else")

    @hookimpl
    def xpushare_admission_guard(self) -> Any:
        return {"container_paths": ["relative/dir"]}

    @hookimpl
    def xpushare_preferred_allocation(self) -> Any:
        return ["not-offered"]


class Good(Vendor):
    """Answers every hook correctly and remembers which OS thread ran the node-side ones."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.threads: set[int] = set()

    def _here(self) -> None:
        self.threads.add(threading.get_native_id())

    @hookimpl
    def xpushare_startup(self, ctx: Any) -> None:
        self._here()
        ctx.state["started"] = True

    @hookimpl
    def xpushare_detect(self, ctx: Any) -> list[Device]:
        self._here()
        assert ctx.state["started"]
        return [_device(self.name, 0), _device(self.name, 1)]

    @hookimpl
    def xpushare_allocate(self, request: AllocateRequest) -> Any:
        self._here()
        return {"envs": {"GOOD_DEVICES": ",".join(s.device_id for s in request.slices)}}

    @hookimpl
    def xpushare_score(self) -> float:
        return 0.25

    @hookimpl
    def xpushare_patch_annotations(self, assignment: PodAssignment) -> dict[str, str]:
        return {"good.example.com/devices": str(len(assignment.containers))}

    @hookimpl
    def xpushare_mutate_admission(self, index: int) -> list[JsonPatchOp]:
        return [JsonPatchOp(op="add", path=f"/spec/containers/{index}/env/-", value={"name": "G"})]

    @hookimpl
    def xpushare_shutdown(self, ctx: Any) -> None:
        self._here()

    @hookimpl
    def xpushare_admission_guard(self, vendor: VendorSpec, config: Any) -> AdmissionGuard:
        # Paths from the vendor's own configuration, as a real vendor's HAMi-core directory.
        root = config.get("root", "/opt/good")
        return AdmissionGuard(env=(f"{vendor.name.upper()}_OFF",), container_paths=(root,))


def _device(vendor: str, index: int) -> Device:
    return Device(vendor=vendor, id=f"{vendor}-{index}", index=index, model="X", memory_mib=1024)


@pytest.fixture
def pair() -> Iterator[tuple[PluginHost, Good]]:
    h = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS, node_name="n1")
    good = Good("good")
    h.register("broken", Broken("broken"))
    h.register("good", good)
    yield h, good
    h.close()


def _node(vendor: str) -> NodeView:
    return NodeView(name="n1", devices=(_device(vendor, 0), _device(vendor, 1)))


POD = PodView(ref=PodRef(name="p"), containers=(ContainerView(name="c"),))


def test_exception_in_one_vendor_names_it_and_spares_the_other(pair: Any) -> None:
    h, _ = pair
    with pytest.raises(PluginError, match=r"'broken'.*xpushare_fit raised RuntimeError: boom"):
        h.vendor("broken").fit(
            request=ContainerRequest(vendor="broken"),
            node=_node("broken"),
            usage={},
            device_order=["broken-0", "broken-1"],
        )
    result = h.vendor("good").fit(
        request=ContainerRequest(vendor="good", memory_mib=100),
        node=_node("good"),
        usage={},
        device_order=["good-1", "good-0"],
    )
    assert isinstance(result, FitResult) and result.fits


def test_bad_return_values_are_refused_at_the_boundary(pair: Any) -> None:
    h, _ = pair
    broken = h.vendor("broken")
    fit = FitResult(fits=True)
    with pytest.raises(PluginError, match=r"xpushare_score returned an invalid result.*outside"):
        broken.score(
            request=ContainerRequest(vendor="broken"), node=_node("broken"), fit=fit, usage={}
        )
    with pytest.raises(PluginError, match="reserved for the xpushare core"):
        broken.patch_annotations(pod=POD, assignment=PodAssignment(node="n1", containers=()))
    with pytest.raises(PluginError, match="xpushare_mutate_admission returned an invalid"):
        broken.mutate_admission(
            pod=POD, container=POD.containers[0], index=0, request=ContainerRequest(vendor="broken")
        )
    with pytest.raises(PluginError, match=r"(?s)xpushare_admission_guard returned.*absolute"):
        broken.admission_guard()
    asking = ContainerView(name="c", limits={"broken.example.com/gpu": "1"})
    with pytest.raises(PluginError, match="request is for vendor 'someone-else'"):
        broken.resource_request(pod=POD, container=asking)
    with pytest.raises(PluginError, match="xpushare_detect returned an invalid result"):
        broken.detect()
    with pytest.raises(PluginError, match="names devices kubelet did not offer"):
        broken.preferred_allocation(["a", "b"], [], 1)
    good = h.vendor("good")
    assert (
        good.score(request=ContainerRequest(vendor="good"), node=_node("good"), fit=fit, usage={})
        == 0.25
    )
    assert good.patch_annotations(pod=POD, assignment=PodAssignment(node="n1", containers=())) == {
        "good.example.com/devices": "0"
    }
    patches = good.mutate_admission(
        pod=POD, container=POD.containers[0], index=3, request=ContainerRequest(vendor="good")
    )
    assert patches[0].path == "/spec/containers/3/env/-"


def test_node_side_hooks_run_on_the_vendors_own_thread(pair: Any) -> None:
    h, good = pair
    handle = h.vendor("good")
    handle.startup()
    devices = handle.detect()
    assert [d.id for d in devices] == ["good-0", "good-1"]
    request = AllocateRequest(
        pod=PodRef(name="p"),
        container="c",
        node="n1",
        resource_name="good.example.com/gpu",
        slices=(DeviceSlice(device_id="good-1", memory_mib=10, compute_percent=0),),
        devices=(devices[1],),
    )
    results: list[Any] = []
    callers = [
        threading.Thread(target=lambda: results.append(handle.allocate(request))) for _ in range(3)
    ]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert all(r.envs == {"GOOD_DEVICES": "good-1"} for r in results)
    native_id = handle.context.library.native_id
    assert good.threads == {native_id}
    assert native_id != threading.get_native_id()


async def test_async_node_calls_share_the_thread(pair: Any) -> None:
    h, good = pair
    handle = h.vendor("good")
    await handle.astartup()
    assert len(await handle.adetect()) == 2
    assert good.threads == {handle.context.library.native_id}


def test_defaults_answer_for_hooks_a_vendor_leaves_out(pair: Any) -> None:
    h, _ = pair
    handle = h.vendor("good")
    assert handle.preferred_allocation(["a", "b", "c"], ["c"], 2) == ["c", "a"]
    assert handle.monitor([]) is None
    assert handle.check_health([], 0.0) is None


def test_detect_returning_none_means_inactive() -> None:
    class Silent(Vendor):
        @hookimpl
        def xpushare_detect(self) -> None:
            return None

    h = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    h.register("silent", Silent("silent"))
    try:
        with pytest.raises(VendorUnavailable, match="no detection result"):
            h.vendor("silent").detect()
    finally:
        h.close()


def test_shutdown_runs_only_after_a_successful_startup() -> None:
    calls: list[str] = []

    class Flaky(Vendor):
        @hookimpl
        def xpushare_startup(self) -> None:
            raise VendorUnavailable("flaky", "no library here")

        @hookimpl
        def xpushare_shutdown(self) -> None:
            calls.append("shutdown")

    h = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS)
    h.register("flaky", Flaky("flaky"))
    with pytest.raises(VendorUnavailable):
        h.vendor("flaky").startup()
    h.close()
    assert calls == []


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    request = {"uid": "u", "operation": "CREATE", "namespace": "ns", "object": obj}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _asking(resource: str, mount: str) -> dict[str, Any]:
    container = {
        "name": "c",
        "resources": {"limits": {resource: "1"}},
        "volumeMounts": [{"name": "v", "mountPath": mount}],
    }
    spec = {"containers": [container], "volumes": [{"name": "v", "emptyDir": {}}]}
    return {"metadata": {"name": "p"}, "spec": spec}


def test_a_vendors_admission_guard_reaches_the_webhook_and_a_broken_one_only_its_pods() -> None:
    from xpushare.scheduler.cluster import ClusterState
    from xpushare.scheduler.config import WebhookConfig
    from xpushare.scheduler.webhook import Webhook
    from xpushare.scheduling.ledger import UsageLedger

    h = PluginHost(
        HostSettings(), core_plugins=CORE_PLUGINS, vendor_config={"good": {"root": "/srv/iso"}}
    )
    h.register("broken", Broken("broken"))
    h.register("good", Good("good"))
    try:
        guard = h.vendor("good").admission_guard()
        assert guard.env == ("GOOD_OFF",) and guard.container_paths == ("/srv/iso",)
        webhook = Webhook(
            host=h,
            cluster=ClusterState(UsageLedger()),
            config=WebhookConfig(),
            scheduler_name="s",
        )
        good = webhook.review(_review(_asking("good.example.com/gpu", "/srv")))["response"]
        assert good["allowed"] is False and good["status"]["code"] == 403
        assert "spec.containers[0].volumeMounts[0].mountPath '/srv'" in good["status"]["message"]
        fine = webhook.review(_review(_asking("good.example.com/gpu", "/data")))["response"]
        assert fine["allowed"] is True
        # The broken vendor's pods are refused as a server error, not admitted unguarded.
        broken = webhook.review(_review(_asking("broken.example.com/gpu", "/data")))["response"]
        assert broken["allowed"] is False and broken["status"]["code"] == 500
        assert "xpushare_admission_guard" in broken["status"]["message"]
    finally:
        h.close()


class Counting(Vendor):
    """Counts the containers its request hook is asked about."""

    def __init__(self, name: str, spec: VendorSpec) -> None:
        super().__init__(name, vendor_spec=spec)
        self.asked: list[str] = []

    @hookimpl
    def xpushare_resource_request(self, container: ContainerView) -> ContainerRequest | None:
        self.asked.append(container.name)
        return None


@pytest.mark.parametrize(
    ("extra", "asked"),
    [
        ((), ["mine", "by-request"]),
        (("c.example.com/fabric",), ["mine", "by-request", "fabric"]),
        (None, ["mine", "by-request", "fabric", "other"]),
    ],
)
def test_a_vendor_is_asked_only_about_containers_naming_its_resources(
    extra: tuple[str, ...] | None, asked: list[str]
) -> None:
    """A pod is parsed by every installed vendor: one whose resources a container does not
    name is not asked (the pluggy call costs more than the answer), unless it reads other
    resources (``request_resources``) or every container (``None``)."""
    spec = stub_spec("counting", domain="c.example.com").model_copy(
        update={"request_resources": extra}
    )
    vendor = Counting("counting", spec)
    h = PluginHost(HostSettings(), core_plugins=CORE_PLUGINS, node_name="n1")
    h.register("counting", vendor)
    try:
        handle = h.vendor("counting")
        for container in (
            ContainerView(name="mine", limits={"c.example.com/gpumem": "1024"}),
            ContainerView(name="by-request", requests={"c.example.com/gpu": "1"}),
            ContainerView(name="fabric", limits={"c.example.com/fabric": "1"}),
            ContainerView(name="other", limits={"nvidia.com/gpu": "1", "cpu": "2"}),
        ):
            handle.resource_request(pod=POD, container=container)
        assert vendor.asked == asked
    finally:
        h.close()

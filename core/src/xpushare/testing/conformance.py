"""A conformance suite every vendor plugin can run in its own tests.

Why: the node agent relies on promises the type checker cannot see: node-side hooks run on
the vendor's library thread, detection is repeatable, "library missing" is
:class:`~xpushare.errors.VendorUnavailable` with a reason, allocate gives a container
something to find its devices by, preferred allocation obeys kubelet's constraints, and
shutdown lets the thread go. This suite checks them through the real plugin host and, for
Allocate, the real node agent serving a :class:`~xpushare.testing.kubelet.FakeKubelet` over
unix sockets. Use it from a test module::

    from xpushare.testing.conformance import VendorConformance

    class TestAcmeConformance(VendorConformance):
        vendor = "acme"

        def available(self, tmp_path, monkeypatch):
            lib = compile_shared_library(FAKE_LIBACME_C, tmp_path, "libacme.so.1")
            return {"library_path": str(lib)}  # the vendor's config section

        def unavailable(self, tmp_path, monkeypatch):
            return {"library_path": str(tmp_path / "missing" / "libacme.so.1")}

The vendor is loaded from its entry point (set :attr:`VendorConformance.plugin` to register
a plugin object directly instead). Every check is a plain synchronous test, so the suite
works whatever a project's pytest-asyncio settings are. See docs/testing-plugins.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from xpushare.errors import VendorUnavailable
from xpushare.hookspecs import hookimpl
from xpushare.models import API_VERSION, ContainerAssignment, DeviceSlice, PodAssignment
from xpushare.node import NodeAgent, NodeConfig
from xpushare.node.devices import replica_id
from xpushare.plugins import HostSettings, PluginHost, PluginKind
from xpushare.testing.kube import InMemoryKube
from xpushare.testing.kubelet import ContainerSpec, FakeKubelet, valid_extended_resource_name

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator, Mapping

    from xpushare.models import Device
    from xpushare.plugins import VendorHandle

__all__ = ["ThreadProbe", "VendorConformance"]

NODE_HOOKS = (
    "xpushare_startup",
    "xpushare_detect",
    "xpushare_monitor",
    "xpushare_check_health",
    "xpushare_allocate",
    "xpushare_preferred_allocation",
    "xpushare_shutdown",
)


@dataclass(eq=False)  # pluggy keeps plugins in sets: identity hashing
class ThreadProbe:
    """An extension plugin that records, for every node-side hook call, the thread it ran on
    and whether that thread is the vendor's library thread."""

    calls: list[tuple[str, int, bool]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _seen(self, hook: str, ctx: Any) -> None:
        with self._lock:
            self.calls.append((hook, threading.get_ident(), ctx.library.owns_current_thread()))

    @hookimpl(wrapper=True)
    def xpushare_startup(self, ctx: Any) -> Generator[None, Any, Any]:
        self._seen("xpushare_startup", ctx)
        return (yield)

    @hookimpl(wrapper=True)
    def xpushare_shutdown(self, ctx: Any) -> Generator[None, Any, Any]:
        self._seen("xpushare_shutdown", ctx)
        return (yield)

    @hookimpl(wrapper=True)
    def xpushare_detect(self, ctx: Any) -> Generator[None, Any, Any]:
        self._seen("xpushare_detect", ctx)
        return (yield)

    @hookimpl(wrapper=True)
    def xpushare_monitor(self, ctx: Any) -> Generator[None, Any, Any]:
        self._seen("xpushare_monitor", ctx)
        return (yield)

    @hookimpl(wrapper=True)
    def xpushare_check_health(self, ctx: Any) -> Generator[None, Any, Any]:
        self._seen("xpushare_check_health", ctx)
        return (yield)

    @hookimpl(wrapper=True)
    def xpushare_allocate(self, ctx: Any) -> Generator[None, Any, Any]:
        self._seen("xpushare_allocate", ctx)
        return (yield)

    @hookimpl(wrapper=True)
    def xpushare_preferred_allocation(self, ctx: Any) -> Generator[None, Any, Any]:
        self._seen("xpushare_preferred_allocation", ctx)
        return (yield)


def _serves(kubelet: FakeKubelet, resource: str) -> bool:
    return kubelet.allocatable(resource) > 0


def _serves_anew(kubelet: FakeKubelet, resource: str, before: int) -> bool:
    """*resource* registered again since *before* registrations, and its devices listed."""
    return len(kubelet.registrations_of(resource)) > before and _serves(kubelet, resource)


def _at_most(agent: NodeAgent, pods: int) -> bool:
    return len(agent.ledger) <= pods


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.01)

    try:
        async with asyncio.timeout(timeout_s):
            await wait()
    except TimeoutError:
        raise AssertionError(f"not reached within {timeout_s:g} s: {what}") from None


@contextlib.contextmanager
def _short_dir() -> Iterator[Path]:
    # A unix socket path has at most 107 bytes; pytest's tmp_path is often longer.
    path = Path(tempfile.mkdtemp(prefix="xpc", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class VendorConformance:
    """Subclass as ``Test<Vendor>Conformance``; set :attr:`vendor`; implement
    :meth:`available` and :meth:`unavailable` (see the module docstring)."""

    #: The vendor's entry-point name.
    vendor: ClassVar[str] = ""
    #: A plugin object or module to register directly; ``None`` loads the entry point.
    plugin: ClassVar[object | None] = None
    #: The node name the vendor sees (``ctx.node_name``).
    node_name: ClassVar[str] = "conformance-node"
    #: How long the node agent's Allocate may take, seconds (a fake library answers fast).
    allocate_deadline_s: ClassVar[float] = 5.0

    # -- what a plugin's test class provides ------------------------------------------------

    def available(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        """Make the vendor usable here with at least one device (e.g. compile a fake library,
        set environment variables with *monkeypatch*); return the vendor's config section."""
        raise NotImplementedError("a conformance test class must implement available()")

    def unavailable(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        """Make the vendor's library missing; return the vendor's config section."""
        raise NotImplementedError("a conformance test class must implement unavailable()")

    # -- plumbing ------------------------------------------------------------------------------

    def make_host(self, config: Mapping[str, Any]) -> PluginHost:
        """A strict host with only this vendor (and the core's defaults) loaded."""
        if not self.vendor:
            raise TypeError(f"{type(self).__name__} must set the class attribute 'vendor'")
        from xpushare.plugins.builtin import CORE_PLUGINS

        settings = HostSettings(allow=frozenset({self.vendor}), strict=True)
        host = PluginHost(
            settings,
            core_plugins=CORE_PLUGINS,
            node_name=self.node_name,
            vendor_config={self.vendor: dict(config)},
        )
        if self.plugin is not None:
            host.register(self.vendor, self.plugin)
        else:
            host.load_entry_points()
        return host

    @pytest.fixture
    def config(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
        return self.available(tmp_path, monkeypatch)

    @pytest.fixture
    def probe(self) -> ThreadProbe:
        return ThreadProbe()

    @pytest.fixture
    def host(self, config: Mapping[str, Any], probe: ThreadProbe) -> Iterator[PluginHost]:
        host = self.make_host(config)
        host.register("conformance-probe", probe, kind=PluginKind.EXTENSION)
        try:
            yield host
        finally:
            host.close()

    @pytest.fixture
    def handle(self, host: PluginHost) -> VendorHandle:
        return host.vendor(self.vendor)

    @pytest.fixture
    def devices(self, handle: VendorHandle) -> tuple[Device, ...]:
        handle.startup()
        found = handle.detect()
        assert found, f"vendor {self.vendor}: available() must give at least one device"
        return found

    # -- the checks ----------------------------------------------------------------------------

    def test_spec_is_valid(self, handle: VendorHandle) -> None:
        spec = handle.spec
        assert spec.name == self.vendor
        assert spec.api_version == API_VERSION
        assert valid_extended_resource_name(spec.resource_names.count), (
            f"kubelet would refuse resource name {spec.resource_names.count!r}"
        )

    def test_node_hooks_run_on_the_vendor_thread(
        self, handle: VendorHandle, devices: tuple[Device, ...], probe: ThreadProbe
    ) -> None:
        handle.monitor(devices)
        handle.check_health(devices, 0.01)
        ids = [replica_id(d.id, 0) for d in devices]
        handle.preferred_allocation(ids, [], 1)
        thread = handle.context.library
        seen = {hook for hook, _, _ in probe.calls}
        assert {"xpushare_startup", "xpushare_detect"} <= seen
        wrong = [(hook, on) for hook, _, on in probe.calls if not on]
        assert not wrong, f"hooks ran off the library thread of {thread!r}: {wrong}"
        assert len({ident for _, ident, _ in probe.calls}) == 1, "hooks ran on several threads"

    def test_detect_is_idempotent_and_well_formed(
        self, handle: VendorHandle, devices: tuple[Device, ...]
    ) -> None:
        again = handle.detect()
        assert again == devices, "a second detect on an unchanged machine must say the same"
        assert all(d.vendor == self.vendor for d in devices)
        assert len({d.id for d in devices}) == len(devices), "device ids must be unique"
        assert len({d.index for d in devices}) == len(devices), "device indexes must be unique"
        assert all(d.share_slots >= 1 for d in devices)

    def test_monitor_snapshot_is_valid(
        self, handle: VendorHandle, devices: tuple[Device, ...]
    ) -> None:
        snapshot = handle.monitor(devices)
        if snapshot is None:
            return  # the vendor does not monitor: allowed
        ids = {d.id for d in devices}
        assert {s.device_id for s in snapshot.devices} <= ids, "samples of unknown devices"
        assert {c.device_id for c in snapshot.containers} <= ids, "usage on unknown devices"

    def test_health_events_are_well_formed(
        self, handle: VendorHandle, devices: tuple[Device, ...]
    ) -> None:
        events = handle.check_health(devices, 0.01)
        if events is None:
            return  # no health checks: allowed
        ids = {d.id for d in devices}
        assert all(e.device_id in ids for e in events), "events about unknown devices"

    def test_preferred_allocation_obeys_must_include_and_size(
        self, handle: VendorHandle, devices: tuple[Device, ...]
    ) -> None:
        available = [replica_id(d.id, n) for d in devices for n in range(min(d.share_slots, 2))]
        for size in range(1, min(len(available), 3) + 1):
            must = available[-1:]
            picked = handle.preferred_allocation(available, must, size)
            assert len(picked) == size and len(set(picked)) == size
            assert set(must) <= set(picked) <= set(available)

    def test_allocate_one_share_through_the_node_agent(self, config: Mapping[str, Any]) -> None:
        asyncio.run(self._allocate_through_agent(config))

    async def _allocate_through_agent(self, config: Mapping[str, Any]) -> None:
        host = self.make_host(config)
        kube = InMemoryKube(self.node_name)
        with _short_dir() as plugin_dir:
            agent = NodeAgent(
                NodeConfig(
                    node_name=self.node_name,
                    device_plugin_dir=plugin_dir,
                    metrics_host="127.0.0.1",
                    metrics_port=0,
                    socket_poll_s=0.02,
                    register_retry_s=0.02,
                    allocate_deadline_s=self.allocate_deadline_s,
                    partition_lock_path=None,
                ),
                host,
                kube,
            )
            resource = host.vendor(self.vendor).spec.resource_names.count
            async with FakeKubelet(plugin_dir, dial_timeout_s=5.0) as kubelet:
                run = asyncio.create_task(agent.run())
                try:
                    await kubelet.wait_until(
                        lambda: kubelet.allocatable(resource) > 0,
                        timeout_s=30,
                        what=f"{resource} registered with healthy devices",
                    )
                    device = agent.devices[self.vendor].view.devices[0]
                    pod = kube.add_pod("conformance")
                    piece = DeviceSlice(
                        device_id=device.id,
                        memory_mib=min(device.memory_mib, 1024),
                        compute_percent=10,
                    )
                    kube.bind(
                        pod,
                        PodAssignment(
                            node=self.node_name,
                            containers=(
                                ContainerAssignment(
                                    container="main", vendor=self.vendor, devices=(piece,)
                                ),
                            ),
                        ),
                    )
                    result = await kubelet.admit_pod(
                        pod.uid, [ContainerSpec("main", {resource: 1})]
                    )
                    assert result["main"].envs, "allocate must give the container env vars"
                finally:
                    await agent.stop()
                    with contextlib.suppress(Exception):
                        await run
                    host.close()

    # -- release -------------------------------------------------------------------------------

    #: Pods allocated and ended in the release check, over :attr:`churn_sessions` agent
    #: processes (pods end while an agent runs and while none does).
    churn_pods: ClassVar[int] = 1000
    churn_sessions: ClassVar[int] = 4

    def created(self, config: Mapping[str, Any]) -> list[str] | None:
        """What the vendor's allocate has created on the node and not freed yet (directories,
        instances, configurations), one name each; ``None``: it creates nothing at Allocate.

        A vendor that creates something must implement ``xpushare_release`` and this."""
        return None

    def test_release_frees_what_allocate_created(self, config: Mapping[str, Any]) -> None:
        asyncio.run(self._churn(config))

    async def _churn(self, config: Mapping[str, Any]) -> None:
        made = self.created(config)
        pods = self.churn_pods if made is not None else min(self.churn_pods, 20)
        sessions = max(1, self.churn_sessions)
        per_session = max(2, pods // sessions)
        kube = InMemoryKube(self.node_name)
        alive: list[tuple[Any, str]] = []
        with _short_dir() as plugin_dir:
            async with FakeKubelet(plugin_dir, dial_timeout_s=5.0) as kubelet:
                for session in range(sessions + 1):
                    host = self.make_host(config)
                    if made is not None:
                        handle = host.vendor(self.vendor)
                        assert handle.implements("xpushare_release"), (
                            f"vendor {self.vendor} creates {made or 'things'} at Allocate and "
                            "must implement xpushare_release to free them"
                        )
                    agent = NodeAgent(self._churn_config(plugin_dir), host, kube)
                    resource = host.vendor(self.vendor).spec.resource_names.count
                    # The kubelet still lists the previous session's devices: wait for this
                    # agent's own registration, made once it has detected its devices.
                    before = len(kubelet.registrations_of(resource))
                    run = asyncio.create_task(agent.run())
                    try:
                        await kubelet.wait_until(
                            partial(_serves_anew, kubelet, resource, before), timeout_s=30
                        )
                        if session == sessions:
                            await _until(partial(_at_most, agent, 0), "every pod released")
                            break
                        devices = agent.devices[self.vendor].view.devices
                        # At most half of kubelet's shares are held at once, so each pod's
                        # assigned device always has one free.
                        keep = max(1, sum(d.share_slots for d in devices) // 2)
                        alive = []
                        for i in range(per_session):
                            if len(alive) >= keep:  # the oldest ends while this agent runs
                                pod, _ = alive.pop(0)
                                kube.remove_pod(pod.namespace, pod.name)
                                kubelet.remove_pod(pod.uid)
                            held = [device_id for _, device_id in alive]
                            device = min(devices, key=lambda d: held.count(d.id) / d.share_slots)
                            pod = kube.add_pod(f"churn-{session}-{i}")
                            piece = DeviceSlice(
                                device_id=device.id,
                                memory_mib=min(device.memory_mib, 256),
                                compute_percent=1,
                            )
                            main = ContainerAssignment(
                                container="main", vendor=self.vendor, devices=(piece,)
                            )
                            kube.bind(pod, PodAssignment(node=self.node_name, containers=(main,)))
                            await kubelet.admit_pod(pod.uid, [ContainerSpec("main", {resource: 1})])
                            alive.append((pod, device.id))
                        await _until(
                            partial(_at_most, agent, len(alive)),
                            "the pods that ended released while the agent runs",
                        )
                    finally:
                        await agent.stop()
                        with contextlib.suppress(Exception):
                            await run
                        host.close()
                    for pod, _ in alive:  # the rest end while no agent runs
                        kube.remove_pod(pod.namespace, pod.name)
                        kubelet.remove_pod(pod.uid)
        left = self.created(config)
        assert not left, f"vendor {self.vendor}: left behind after every pod ended: {left[:10]}"

    def _churn_config(self, plugin_dir: Path) -> NodeConfig:
        return NodeConfig(
            node_name=self.node_name,
            device_plugin_dir=plugin_dir,
            metrics_host="127.0.0.1",
            metrics_port=0,
            socket_poll_s=0.02,
            register_retry_s=0.02,
            # Each Allocate of a releasing vendor fsyncs the ledger, which a busy test
            # machine can make slow; this check is about what is left, not about speed.
            allocate_deadline_s=max(self.allocate_deadline_s, 20.0),
            partition_lock_path=None,
            pod_resources_socket=None,
            release_poll_s=0.02,
            monitor_interval_s=5.0,
        )

    def test_shutdown_is_clean(self, handle: VendorHandle, devices: tuple[Device, ...]) -> None:
        thread = handle.context.library
        handle.shutdown()
        assert thread.stopped, f"the library thread of {self.vendor} did not stop"

    def test_missing_library_makes_the_vendor_inactive_with_a_reason(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        host = self.make_host(self.unavailable(tmp_path, monkeypatch))
        try:
            handle = host.vendor(self.vendor)
            handle.startup()
            handle.detect()
        except VendorUnavailable as exc:
            assert exc.vendor == self.vendor
            assert exc.reason.strip(), "say why: which paths were tried, what failed"
        except Exception as exc:
            pytest.fail(
                f"vendor {self.vendor}: with its library missing, startup/detect raised "
                f"{type(exc).__name__} ({exc}); raise VendorUnavailable(vendor, reason) instead"
            )
        else:
            pytest.fail(
                f"vendor {self.vendor}: with its library missing, startup and detect "
                "succeeded; raise VendorUnavailable(vendor, reason) instead"
            )
        finally:
            host.close()

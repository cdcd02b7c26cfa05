"""Registration, ListAndWatch and re-registration with a fake kubelet over real sockets."""

import asyncio
import os
import socket
import stat
from types import SimpleNamespace

from nodekit import NODE, RESOURCE, mock_host, running

from xpushare.node.config import NodeConfig
from xpushare.node.deviceplugin.generation import PluginServer
from xpushare.node.dirwatch import DirectoryWatch
from xpushare.testing.kubelet import FakeKubelet


async def test_registers_and_lists_every_share_of_every_device(plugin_dir):
    async with running(plugin_dir) as run:
        registration = run.kubelet.registrations_of(RESOURCE)[0]
        assert registration.version == "v1beta1"
        assert registration.endpoint == "xpushare-mock.sock"
        assert registration.options.get_preferred_allocation_available
        assert not registration.options.pre_start_required
        assert stat.S_ISSOCK((plugin_dir / registration.endpoint).stat().st_mode)
        devices = run.kubelet.devices(RESOURCE)
        # 8 devices x 10 share slots (the mock's default), each id naming its device.
        assert len(devices) == 80
        assert set(devices.values()) == {"Healthy"}
        assert f"MOCK-{NODE}-7::9" in devices
        assert run.kubelet.capacity(RESOURCE) == run.kubelet.allocatable(RESOURCE) == 80


async def test_registration_waits_for_kubelet_sock(plugin_dir):
    # The agent starts before kubelet: it serves, retries Register, and gets in once
    # kubelet.sock appears.
    kubelet = FakeKubelet(plugin_dir, dial_timeout_s=2.0)
    async with running(plugin_dir, kubelet=kubelet, wait_for=None) as run:
        plugin = await run.agent.wait_plugin("mock")
        await asyncio.sleep(0.05)
        assert not plugin.registered
        await kubelet.start()
        await kubelet.wait_until(lambda: kubelet.allocatable(RESOURCE) == 80, what="listed")
        assert plugin.registered
    await kubelet.stop()


async def test_kubelet_restart_twenty_times_reregisters_each_time(plugin_dir):
    async with running(plugin_dir) as run:
        kubelet = run.kubelet
        plugin = run.agent.plugins["mock"]
        for restart in range(1, 21):
            generation = plugin.generation
            await kubelet.restart()
            # Right after a restart kubelet holds no devices for the resource.
            assert kubelet.allocatable(RESOURCE) == 0
            await kubelet.wait_until(
                lambda: kubelet.registered(RESOURCE) and kubelet.allocatable(RESOURCE) == 80,
                what=f"re-registration after restart {restart}",
            )
            assert plugin.generation > generation
        assert len(kubelet.registrations_of(RESOURCE)) == 21
        # Counted once kubelet's answer reaches the plugin, a moment after kubelet logs it.
        for _ in range(1000):
            if plugin.registrations == 21:
                break
            await asyncio.sleep(0.01)
        assert plugin.registrations == 21
        # Generations replace the socket; they never leave a dead one behind.
        leftovers = sorted(p.name for p in plugin_dir.iterdir())
        assert leftovers == ["kubelet.sock", "xpushare-mock.sock"]


async def test_plugin_restart_replaces_the_stale_socket_and_registers_again(plugin_dir):
    kubelet = FakeKubelet(plugin_dir, dial_timeout_s=2.0)
    await kubelet.start()
    try:
        async with running(plugin_dir, kubelet=kubelet):
            pass
        # The agent is gone; its socket file stays (only a new generation replaces it),
        # and kubelet's stream ended: the resource is not allocatable any more.
        assert (plugin_dir / "xpushare-mock.sock").exists()
        await kubelet.wait_until(lambda: kubelet.allocatable(RESOURCE) == 0, what="disconnect")
        assert kubelet.capacity(RESOURCE) == 80  # kept during the grace period
        async with running(plugin_dir, kubelet=kubelet, host=mock_host()):
            assert kubelet.allocatable(RESOURCE) == 80
        assert len(kubelet.registrations_of(RESOURCE)) == 2
    finally:
        await kubelet.stop()


async def test_capacity_drops_to_zero_after_the_grace_period(plugin_dir):
    kubelet = FakeKubelet(plugin_dir, dial_timeout_s=2.0, grace_period_s=0.0)
    await kubelet.start()
    try:
        async with running(plugin_dir, kubelet=kubelet):
            assert kubelet.capacity(RESOURCE) == 80
        await kubelet.wait_until(lambda: kubelet.capacity(RESOURCE) == 0, what="grace over")
    finally:
        await kubelet.stop()


async def test_a_kubelet_restart_is_seen_through_inotify_not_the_poll(plugin_dir):
    # Polls every 30 s and a registration retry as slow: only the directory watch can make
    # the agent register again within the wait below.
    async with running(plugin_dir, socket_poll_s=30.0, register_retry_s=30.0) as run:
        assert run.agent.dirwatch.inotify
        for restart in range(3):
            before = len(run.kubelet.registrations_of(RESOURCE))
            await run.kubelet.restart()
            await run.kubelet.wait_until(
                lambda b=before: len(run.kubelet.registrations_of(RESOURCE)) > b,
                timeout_s=10.0,
                what=f"registered again after restart {restart + 1}",
            )


def _bound_socket(path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock


async def test_a_restart_before_the_watch_began_is_not_slept_through(plugin_dir):
    # kubelet can restart between accepting Register and the plugin's task resuming (CI saw
    # it: a 30 s stall unregistered). By the time the watch starts, the restart's events are
    # over; the watch must look before it waits for the next change.
    watch = DirectoryWatch(plugin_dir)
    assert watch.start()
    config = NodeConfig(node_name=NODE, device_plugin_dir=plugin_dir, socket_poll_s=30.0)
    service = SimpleNamespace(vendor="mock", resource=RESOURCE)
    server = PluginServer(service, config, watch=watch)  # type: ignore[arg-type]
    sockets = [_bound_socket(plugin_dir / "kubelet.sock"), _bound_socket(server.socket_path)]
    ours, kubelet = server.socket_path.stat().st_ino, config.kubelet_socket.stat().st_ino
    try:
        # kubelet restarted: it wiped our socket and made kubelet.sock anew; the watch's
        # events for that have already been drained.
        os.unlink(server.socket_path)
        os.unlink(config.kubelet_socket)
        sockets.append(_bound_socket(config.kubelet_socket))
        for _ in range(100):  # one drain can take all three events
            await asyncio.sleep(0.01)
            if watch.version:
                break
        await asyncio.sleep(0.05)
        assert watch.version
        await asyncio.wait_for(server._watch(ours, kubelet), 2.0)
        # Our socket still ours, kubelet.sock re-created: that ends the generation too.
        sockets.append(_bound_socket(server.socket_path))
        await asyncio.wait_for(server._watch(server.socket_path.stat().st_ino, kubelet), 2.0)
    finally:
        for sock in sockets:
            sock.close()
        watch.close()


async def test_a_refused_registration_is_retried_soon_not_after_the_retry_interval(plugin_dir):
    # kubelet's socket exists a moment before it takes plugins: the first dials after the
    # directory watch wakes the agent can be refused, and must not cost register_retry_s.
    async with running(plugin_dir, socket_poll_s=30.0, register_retry_s=30.0) as run:
        before = len(run.kubelet.registrations_of(RESOURCE))
        run.kubelet.refuse_registrations = 3
        await run.kubelet.restart()
        await run.kubelet.wait_until(
            lambda: len(run.kubelet.registrations_of(RESOURCE)) > before,
            timeout_s=10.0,
            what="registered after three refusals",
        )
        assert run.kubelet.refused == 3


async def test_without_inotify_the_directory_is_polled(plugin_dir, monkeypatch):
    from xpushare.node import dirwatch

    monkeypatch.setattr(dirwatch, "_inotify_fd", lambda directory: None)
    async with running(plugin_dir) as run:
        assert not run.agent.dirwatch.inotify
        before = len(run.kubelet.registrations_of(RESOURCE))
        await run.kubelet.restart()
        await run.kubelet.wait_until(
            lambda: len(run.kubelet.registrations_of(RESOURCE)) > before, what="polled back"
        )

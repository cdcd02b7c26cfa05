"""/metrics from snapshots only, no stale label sets; /healthz and /readyz."""

import aiohttp
import grpc
import pytest
import yaml
from nodekit import NODE, RESOURCE, eventually, mock_host, running
from prometheus_client.parser import text_string_to_metric_families
from vendors import Acme

from xpushare.models import ContainerAssignment, DeviceSlice, PodAssignment


async def get(run, path):
    url = f"http://127.0.0.1:{run.agent.http_port}{path}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


def samples(text, name):
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                yield sample.labels, sample.value


async def scrape(run):
    status, text = await get(run, "/metrics")
    assert status == 200
    return text


async def test_metrics_serve_monitor_figures_per_device(plugin_dir):
    async with running(plugin_dir, host=mock_host("3x A100-80GB")) as run:
        await eventually(lambda: run.agent.monitor.get("mock") is not None, "first sample")
        text = await scrape(run)
        temps = {
            labels["device"]: v
            for labels, v in samples(text, "xpushare_device_temperature_celsius")
        }
        # The mock reports 40 + index degrees and 10 % x index utilization.
        assert temps == {f"MOCK-{NODE}-{i}": 40.0 + i for i in range(3)}
        util = {
            labels["index"]: v for labels, v in samples(text, "xpushare_device_utilization_ratio")
        }
        assert util == {"0": 0.0, "1": 0.1, "2": 0.2}
        total = [v for _, v in samples(text, "xpushare_device_memory_total_bytes")]
        assert total == [81920 * 1024 * 1024] * 3
        used = [v for _, v in samples(text, "xpushare_device_memory_used_bytes")]
        assert used == [81920 // 4 * 1024 * 1024] * 3
        info = list(samples(text, "xpushare_device_info"))
        assert {labels["model"] for labels, _ in info} == {"A100-80GB"}
        states = {labels["state"]: v for labels, v in samples(text, "xpushare_vendor_state")}
        assert states["ok"] == 1.0 and states["error"] == 0.0
        registered = list(samples(text, "xpushare_device_plugin_registered"))
        assert registered == [({"node": NODE, "vendor": "mock", "resource": RESOURCE}, 1.0)]


async def test_a_device_that_went_away_leaves_no_label_set(plugin_dir, tmp_path):
    spec = tmp_path / "devices.yaml"
    entry = {"model": "A100-80GB", "memory_mib": 81920}
    spec.write_text(yaml.safe_dump({"devices": [{**entry, "count": 3}]}))
    async with running(plugin_dir, host=mock_host(str(spec))) as run:
        await eventually(lambda: run.agent.monitor.get("mock") is not None, "first sample")
        gone = f"MOCK-{NODE}-2"
        text = await scrape(run)
        assert gone in text
        spec.write_text(yaml.safe_dump({"devices": [{**entry, "count": 2}]}))
        run.agent.rescan("mock")
        await eventually(lambda: len(run.agent.devices["mock"].view.devices) == 2, "re-detected")
        text = await scrape(run)
        assert gone not in text
        # kubelet keeps the ids (a withdrawn id strands its checkpoint), marked unhealthy.
        await run.kubelet.wait_until(
            lambda: (
                {v for k, v in run.kubelet.devices(RESOURCE).items() if k.startswith(gone)}
                == {"Unhealthy"}
            ),
            what="the gone device's shares listed unhealthy",
        )


async def test_a_scrape_never_waits_on_a_vendor_library(plugin_dir):
    acme = Acme()
    host = mock_host("1x A100-80GB", ("acme", acme))
    async with running(plugin_dir, host=host, allocate_deadline_s=0.3) as run:
        await run.kubelet.wait_until(lambda: run.kubelet.allocatable(acme.resource) == 20)
        pod = run.kube.add_pod("p")
        run.kube.bind(
            pod,
            PodAssignment(
                node=NODE,
                containers=(
                    ContainerAssignment(
                        container="main",
                        vendor="acme",
                        devices=(DeviceSlice(device_id="ACME-0", memory_mib=1, compute_percent=1),),
                    ),
                ),
            ),
        )
        acme.hang.set()  # acme's library thread will hang in allocate
        with pytest.raises(grpc.aio.AioRpcError):
            await run.kubelet.allocate(acme.resource, ["ACME-0::0"])
        await run.kubelet.wait_until(lambda: run.kubelet.allocatable(acme.resource) == 0)
        calls = len(acme.calls)
        for _ in range(20):
            text = await scrape(run)
        healthy = {labels["device"]: v for labels, v in samples(text, "xpushare_device_healthy")}
        assert healthy == {f"MOCK-{NODE}-0": 1.0, "ACME-0": 0.0, "ACME-1": 0.0}
        assert len(acme.calls) == calls  # nothing reached the hung library
        acme.release.set()


async def test_probes(plugin_dir):
    async with running(plugin_dir) as run:
        await eventually(lambda: run.agent.readiness() == [], "ready")
        assert await get(run, "/healthz") == (200, "ok\n")
        assert await get(run, "/readyz") == (200, "ok\n")
        await run.kubelet.stop()
        run.kubelet.wipe_sockets()  # kubelet gone: the plugin waits for a new one
        await eventually(lambda: run.agent.readiness() != [], "not ready")
        status, text = await get(run, "/readyz")
        assert status == 503
        assert "vendor mock: not registered with kubelet" in text
        assert (await get(run, "/healthz"))[0] == 200


async def test_the_http_server_refuses_what_it_does_not_serve(plugin_dir):
    import asyncio as aio

    async def exchange(raw: bytes) -> bytes:
        reader, writer = await aio.open_connection("127.0.0.1", run.agent.http_port)
        writer.write(raw)
        await writer.drain()
        data = await aio.wait_for(reader.read(65536), 5)
        writer.close()
        return data

    async with running(plugin_dir) as run:
        assert (await exchange(b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
        assert (await exchange(b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n")).startswith(
            b"HTTP/1.1 404"
        )
        body = b"GET /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
        assert (await exchange(body)).startswith(b"HTTP/1.1 413")
        assert (await exchange(b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
        # A head past the bound is cut off, never buffered whole.
        huge = b"GET /healthz HTTP/1.1\r\nX: " + b"a" * (64 << 10) + b"\r\n\r\n"
        assert await exchange(huge) == b""
        # Still serving afterwards, with keep-alive on HTTP/1.1.
        reply = await exchange(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"ok\n")

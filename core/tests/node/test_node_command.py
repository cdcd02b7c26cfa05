"""``xpushare node`` as a real process: registers with a fake kubelet, stops on SIGTERM."""

import asyncio
import os
import signal
import sys

import yaml
from click.testing import CliRunner
from kmock import resource
from nodekit import NODE, RESOURCE

from xpushare.cli.main import main
from xpushare.testing.kubelet import FakeKubelet


def test_help_explains_the_agent():
    result = CliRunner().invoke(main, ["node", "--help"])
    assert result.exit_code == 0
    for words in ("DaemonSet", "--node-name", "NODE_NAME", "--device-plugin-dir", "/readyz"):
        assert words in result.output


def test_a_node_name_is_required():
    result = CliRunner(env={"NODE_NAME": None}).invoke(main, ["node"])
    assert result.exit_code != 0
    assert "--node-name" in result.output


async def test_runs_registers_and_stops_on_sigterm(kmock, plugin_dir, tmp_path):
    kmock.objects[resource("", "v1", "nodes"), None, NODE] = {
        "metadata": {"name": NODE, "annotations": {}, "labels": {}}
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": str(kmock.url).rstrip("/")}}],
                "users": [{"name": "agent", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent"}}],
                "current-context": "fake",
            }
        )
    )
    env = {
        **os.environ,
        "XPUSHARE_MOCK_DEVICES": "4x A100-80GB",
        "XPUSHARE_PLUGINS": "mock",
        "NODE_NAME": NODE,
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    async with FakeKubelet(plugin_dir, dial_timeout_s=5.0) as kubelet:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "xpushare.cli",
            "node",
            "--device-plugin-dir",
            str(plugin_dir),
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            "--partition-lock",
            "",
            env=env,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            await kubelet.wait_until(
                lambda: kubelet.allocatable(RESOURCE) == 40, timeout_s=60, what="registered"
            )
            process.send_signal(signal.SIGHUP)  # re-detect, not stop
            await asyncio.sleep(0.1)
            assert process.returncode is None
            process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), 30)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0, stderr.decode()
        annotations = kmock.objects[resource("", "v1", "nodes"), None, NODE]["metadata"][
            "annotations"
        ]
        assert "xpushare.io/inventory-mock" in annotations

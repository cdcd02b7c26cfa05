"""Configuration from file, environment and flags, and its errors."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from xpushare.cli.main import main
from xpushare.scheduler.config import ConfigError, load_config


def test_file_then_environment_then_flags(tmp_path):
    file = tmp_path / "scheduler.yaml"
    file.write_text(
        "scheduler_name: from-file\nbind:\n  wait_s: 7\n  handoff_ttl_s: 30\n"
        "webhook:\n  bypass_namespaces: [a]\n"
    )
    env = {
        "XPUSHARE_SCHEDULER__BIND__WAIT_S": "4",
        "XPUSHARE_SCHEDULER__WEBHOOK__BYPASS_NAMESPACES": "b,c",
        "XPUSHARE_SCHEDULER__PLACEMENT__MEMORY_OVERCOMMIT": "mock=1.5,*=1",
        "UNRELATED": "x",
    }
    config = load_config(file, env, {"bind.wait_s": "2"})
    assert config.scheduler_name == "from-file"
    assert config.bind.wait_s == 2
    assert config.bind.handoff_ttl_s == 30
    assert config.webhook.bypass_namespaces == ("b", "c")
    assert config.placement.memory_overcommit == {"mock": 1.5, "*": 1.0}


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"XPUSHARE_SCHEDULER__BIND__WAIT_S": "soon"}, "bind.wait_s"),
        ({"XPUSHARE_SCHEDULER__BIND__WAIT_S": "600"}, "bind.wait_s"),
        ({"XPUSHARE_SCHEDULER__SERVER__PORTT": "1"}, "server.portt"),
        ({"XPUSHARE_SCHEDULER__TLS__CERT_FILE": "/x"}, "given together"),
        ({"XPUSHARE_SCHEDULER__LEADER__RETRY_PERIOD_S": "30"}, "retry_period_s"),
        ({"XPUSHARE_SCHEDULER__SERVER__HEADER_TIMEOUT_S": "0"}, "server.header_timeout_s"),
        ({"XPUSHARE_SCHEDULER__SERVER__BODY_TIMEOUT_S": "-1"}, "server.body_timeout_s"),
        ({"XPUSHARE_SCHEDULER__SERVER__IDLE_TIMEOUT_S": "soon"}, "server.idle_timeout_s"),
        ({"XPUSHARE_SCHEDULER__SERVER__MAX_CONNECTIONS": "0"}, "server.max_connections"),
    ],
)
def test_invalid_settings_name_the_setting_and_the_source(env, words):
    with pytest.raises(ConfigError) as err:
        load_config(None, env)
    assert words in str(err.value)
    assert "XPUSHARE_SCHEDULER__* variables" in str(err.value)


def test_connection_limits_have_defaults_and_come_from_every_source(tmp_path):
    server = load_config(None, {}).server
    # Headers in 10 s, a body in 30 s (the longest a caller waits), idle 120 s (longer than
    # the callers' own 90 s pools), 1,000 connections per listener.
    assert (server.header_timeout_s, server.body_timeout_s) == (10, 30)
    assert (server.idle_timeout_s, server.max_connections) == (120, 1000)
    file = tmp_path / "scheduler.yaml"
    file.write_text("server:\n  header_timeout_s: 2.5\n  max_connections: 50\n")
    env = {"XPUSHARE_SCHEDULER__SERVER__BODY_TIMEOUT_S": "12"}
    server = load_config(file, env, {"server.idle_timeout_s": "60"}).server
    assert (server.header_timeout_s, server.body_timeout_s) == (2.5, 12)
    assert (server.idle_timeout_s, server.max_connections) == (60, 50)


def test_unreadable_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad, {})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", {})


def test_cli_prints_the_effective_configuration():
    result = CliRunner().invoke(
        main, ["scheduler", "--print-config", "--port", "9443", "--set", "bind.wait_s=3"]
    )
    assert result.exit_code == 0, result.output
    assert "port: 9443" in result.output and "wait_s: 3.0" in result.output
    bad = CliRunner().invoke(main, ["scheduler", "--print-config", "--set", "bind.wait_s=x"])
    assert bad.exit_code != 0 and "bind.wait_s" in bad.output


def test_example_kube_scheduler_configuration_matches_the_extender():
    import pathlib

    import yaml

    from xpushare.scheduler.config import SchedulerConfig

    root = pathlib.Path(__file__).resolve().parents[3]
    config = yaml.safe_load((root / "deploy/examples/kube-scheduler-config.yaml").read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    (extender,) = config["extenders"]
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert extender["nodeCacheCapable"] is True and extender["weight"] > 0
    # kube-scheduler must wait longer than /bind may wait for a node's handoff.
    assert float(extender["httpTimeout"].rstrip("s")) > SchedulerConfig().bind.wait_s
    managed = {m["name"]: m["ignoredByScheduler"] for m in extender["managedResources"]}
    for name, ignored in managed.items():
        counted = name.endswith("/gpu") or name.endswith("-gpu")
        assert ignored is not counted, name
    assert config["profiles"][0]["schedulerName"] == SchedulerConfig().scheduler_name


def test_the_api_client_reads_proxies_and_netrc_only_where_they_exist(tmp_path):
    from xpushare.scheduler.kube import _environment_matters

    home = {"HOME": str(tmp_path)}
    assert not _environment_matters(home)
    assert _environment_matters({**home, "HTTPS_PROXY": "http://proxy:3128"})
    assert _environment_matters({**home, "no_proxy": "", "all_proxy": "socks5://p"})
    assert not _environment_matters({**home, "NO_PROXY": "10.0.0.0/8"})
    (tmp_path / ".netrc").write_text("machine api login x password y\n")
    assert _environment_matters(home)

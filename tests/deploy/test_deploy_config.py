"""What the chart hands the processes is what their own loaders and command lines accept.

The chart and the code are written by different people; these tests feed the rendered
configuration files and arguments to the real loaders (the scheduler's configuration model,
the CLI's option parsing) so a renamed setting or flag breaks here, not on a cluster.
"""

from __future__ import annotations

import pytest
import yaml
from chartkit import CHART, RELEASE, SCENARIOS, config_file, find, notes, one, render
from click.testing import CliRunner

from xpushare.cli.main import main as cli
from xpushare.cli.node_cmd import command as node_command
from xpushare.plugins import PluginHost
from xpushare.scheduler.config import load_config
from xpushare.scheduler.shortlist import DEFAULT_SHORTLIST


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scheduler_configuration_loads_with_the_real_loader(scenario, tmp_path):
    objects = render(SCENARIOS[scenario])
    path = tmp_path / "scheduler.yaml"
    path.write_text(yaml.safe_dump(config_file(objects, "scheduler.yaml")))
    deployment = one(objects, "Deployment", f"{RELEASE}-xpushare-scheduler")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    config = load_config(path, environ=env)
    assert config.tls.cert_file is not None
    # The variables the scheduler refuses on every pod are the ones the webhook is sent for.
    expression = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]["matchConditions"]
    for name in config.webhook.visibility_env:
        assert f'"{name}"' in expression[0]["expression"]
    assert config.webhook.denied_capabilities == ("SYS_ADMIN", "SYS_MODULE", "ALL")
    assert config.leader.name == f"{RELEASE}-xpushare-scheduler"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    expected = {"https": config.server.port, "metrics": config.server.metrics_port}
    if config.web.enabled:
        # The web view: its own port, on localhost (port-forward), never on the Service.
        expected["web"] = config.web.port
        assert config.web.host == "127.0.0.1"
    assert ports == expected
    service = one(objects, "Service", f"{RELEASE}-xpushare-scheduler")
    targets = {p["targetPort"] for p in service["spec"]["ports"]}
    assert targets == ({"https", "filter"} if config.server.filter_workers else {"https"})
    metrics = one(objects, "Service", f"{RELEASE}-xpushare-scheduler-metrics")
    assert {p["targetPort"] for p in metrics["spec"]["ports"]} == {"metrics"}
    # The webhook path the API server calls is the one the scheduler serves.
    webhook = one(objects, "MutatingWebhookConfiguration")["webhooks"][0]
    assert webhook["clientConfig"]["service"]["path"] == config.server.webhook_path
    # The command line of the Deployment runs: --print-config parses it all and stops.
    args = [a.replace("/etc/xpushare/config/scheduler.yaml", str(path)) for a in container["args"]]
    result = CliRunner().invoke(cli, [*args, "--print-config"], env=env)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.output)["scheduler_name"] == config.scheduler_name


def test_placement_values_reach_the_scheduler():
    objects = render(SCENARIOS["cert-manager-combined-amd-nvidia"])
    placement = config_file(objects, "scheduler.yaml")["placement"]
    assert placement["policy"] == "binpack"
    assert placement["device_policy"] == "spread"
    assert placement["memory_overcommit"] == {"nvidia": 1.5}


def test_the_shortlist_value_reaches_the_scheduler(tmp_path):
    defaults = config_file(render(None), "scheduler.yaml")
    path = tmp_path / "scheduler.yaml"
    path.write_text(yaml.safe_dump(defaults))
    assert load_config(path, environ={}).extender.shortlist == DEFAULT_SHORTLIST
    every = config_file(render({"scheduler": {"shortlist": 0}}), "scheduler.yaml")
    assert every["extender"] == {"shortlist": 0}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_node_agent_arguments_parse_with_the_real_command(scenario, tmp_path):
    objects = render(SCENARIOS[scenario])
    vendor_file = tmp_path / "node-vendors.yaml"
    vendor_file.write_text(yaml.safe_dump(config_file(objects, "node-vendors.yaml")))
    for daemonset in find(objects, "DaemonSet"):
        container = daemonset["spec"]["template"]["spec"]["containers"][0]
        assert container["args"][0] == "node"
        args = [
            a.replace("/etc/xpushare/config/node-vendors.yaml", str(vendor_file))
            for a in container["args"][1:]
        ]
        ctx = node_command.make_context("node", [*args, "--node-name", "n1"])
        assert ctx.params["vendor_config"] == vendor_file
        assert ctx.params["metrics_port"] == container["ports"][0]["containerPort"]
        probe_port = container["readinessProbe"]["httpGet"]["port"]
        assert probe_port == container["ports"][0]["name"]


def test_default_resource_names_are_the_plugins_own():
    """values.yaml lists, per vendor, exactly the names the installed plugin serves by default."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    host = PluginHost.from_environment(environ={})
    served = {name: list(handle.spec.resource_names.all()) for name, handle in host.vendors.items()}
    for vendor, settings in values["vendors"].items():
        assert vendor in served, f"values.yaml names vendor {vendor!r}, no plugin has that name"
        assert settings["resources"] == served[vendor], vendor
        # The chart takes the first as the count kubelet's device plugin advertises.
        assert settings["resources"][0] == host.vendors[vendor].spec.resource_names.count


def test_every_vendor_plugin_has_a_values_entry():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    host = PluginHost.from_environment(environ={})
    assert set(host.vendors) <= set(values["vendors"])


def test_hami_compatibility_values_reach_the_scheduler_and_the_agents(tmp_path):
    values = {
        "metrics": {"hamiNames": True},
        "scheduler": {
            "placement": {
                "requestDefaults": {
                    "*": {"default_memory_mib": 4096, "default_compute_percent": 10}
                }
            }
        },
    }
    objects = render(values)
    path = tmp_path / "scheduler.yaml"
    path.write_text(yaml.safe_dump(config_file(objects, "scheduler.yaml")))
    config = load_config(path, environ={})
    assert config.metrics.hami_names
    assert config.placement.request_defaults["*"].default_memory_mib == 4096
    vendor_file = tmp_path / "node-vendors.yaml"
    vendor_file.write_text(yaml.safe_dump(config_file(objects, "node-vendors.yaml")))
    for daemonset in find(objects, "DaemonSet"):
        args = [
            a.replace("/etc/xpushare/config/node-vendors.yaml", str(vendor_file))
            for a in daemonset["spec"]["template"]["spec"]["containers"][0]["args"][1:]
        ]
        ctx = node_command.make_context("node", [*args, "--node-name", "n1"])
        assert ctx.params["hami_metrics"] is True
    # Off by default.
    assert not load_config(environ={}).metrics.hami_names


def test_the_chart_refuses_a_web_view_off_loopback_without_a_token(tmp_path):
    """Defect 8: the scheduler would refuse to start; the chart says so at install."""
    from chartkit import helm

    helm_python = helm()
    for host in ("0.0.0.0", "10.0.0.7", "::"):
        values = {"scheduler": {"web": {"enabled": True, "host": host}}}
        with pytest.raises(helm_python.HelmError, match=r"scheduler\.web\.auth\.mode=token"):
            render(values)
    values = {
        "scheduler": {
            "web": {
                "enabled": True,
                "host": "0.0.0.0",
                "auth": {"mode": "token"},
                "allowedHosts": ["gpus.example.org"],
            }
        }
    }
    path = tmp_path / "scheduler.yaml"
    path.write_text(yaml.safe_dump(config_file(render(values), "scheduler.yaml")))
    config = load_config(path, environ={})
    assert config.web.host == "0.0.0.0"
    assert config.web.allowed_hosts == ("gpus.example.org",)
    for host in ("localhost", "127.0.0.1", "::1"):
        render({"scheduler": {"web": {"enabled": True, "host": host}}})


def test_the_charts_default_policy_is_the_cli_and_schedulers():
    """The chart said fgd while `xpushare fit`/`simulate` and the scheduler's own config say
    fgd-cpu: one default, everywhere."""
    from xpushare.scheduling import DEFAULT_POLICY

    placement = config_file(render(), "scheduler.yaml")["placement"]
    assert placement["policy"] == DEFAULT_POLICY


def test_notes_list_the_count_columns_without_a_trailing_comma():
    two = {"vendors": {"amd": {"enabled": True}}}
    for values, columns in (
        (None, "xpushare.io/nvidia.count"),
        (two, "xpushare.io/amd.count,xpushare.io/nvidia.count"),
    ):
        text = notes(values)
        line = next(x for x in text.splitlines() if "kubectl get nodes -L" in x)
        assert line.split("-L ", 1)[1].rstrip() == columns, line

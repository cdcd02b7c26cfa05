"""The web view opened without a token (defect 8): refused off loopback, and the Host header
checked so DNS rebinding cannot reach a port-forward."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sched_helpers import add_nodes
from web_helpers import WEB, web_url

from xpushare.cli.main import main as cli
from xpushare.scheduler import load_config
from xpushare.scheduler.config import ConfigError, is_loopback_host
from xpushare.scheduler.web.hostcheck import host_name


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.0.0.7", "scheduler.example"])
def test_a_web_view_off_loopback_without_a_token_is_refused_at_start(host):
    with pytest.raises(ConfigError) as caught:
        load_config(environ={}, overrides={"web.enabled": True, "web.host": host})
    message = str(caught.value)
    assert "web.host" in message and "web.auth.mode" in message and "token" in message
    # The same address with the token check is fine, and so is a view that is off.
    load_config(
        environ={},
        overrides={"web.enabled": True, "web.host": host, "web.auth.mode": "token"},
    )
    load_config(environ={}, overrides={"web.host": host})


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "[::1]", "localhost"])
def test_loopback_hosts_need_no_token(host):
    assert is_loopback_host(host)
    load_config(environ={}, overrides={"web.enabled": True, "web.host": host})


def test_the_cli_names_the_setting_and_what_to_do():
    result = CliRunner().invoke(
        cli, ["scheduler", "--web", "--web-host", "0.0.0.0", "--print-config"]
    )
    assert result.exit_code != 0
    assert "--web-host" in result.output and "web.auth.mode" in result.output
    assert "port-forward" in result.output


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost:9396", "localhost"),
        ("LOCALHOST.", "localhost"),
        ("[::1]:9396", "::1"),
        ("[::1]", "::1"),
        ("evil.example:80", "evil.example"),
        ("a:b", None),
        ("[::1", None),
        ("[::1]x", None),
        ("", None),
    ],
)
def test_host_names_are_read_without_their_port(header, name):
    assert host_name(header) == name


async def _status(http, url, host):
    async with http.get(url, headers={"Host": host}) as response:
        return response.status


async def test_a_rebound_name_is_answered_421(api, scheduler_factory, http):
    add_nodes(api, 1)
    sched = await scheduler_factory(**WEB, **{"web.allowed_hosts": ["gpus.example.org"]})
    await sched.settle(api)
    port = sched.scheduler.ports["web"]
    url = f"{web_url(sched)}/api/v1/fleet"
    for host in ("attacker.example", f"attacker.example:{port}", "localhost.attacker.example"):
        assert await _status(http, url, host) == 421, host
    # The page too: a rebound page must not even load its script from the view.
    assert await _status(http, f"{web_url(sched)}/", "attacker.example") == 421
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "gpus.example.org"):
        assert await _status(http, url, host) == 200, host
    # An address typed by its reader is no rebinding (that needs a name).
    assert await _status(http, url, f"10.1.2.3:{port}") == 200

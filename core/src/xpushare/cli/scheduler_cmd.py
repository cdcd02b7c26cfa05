"""``xpushare scheduler``: run the extender and the admission webhook (a Deployment's command).

Settings come from a YAML file, then ``XPUSHARE_SCHEDULER__*`` variables, then these flags;
``--print-config`` shows the result without starting anything, so an operator can check
what a ConfigMap and an environment add up to.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

import click
import yaml

from xpushare.errors import XpushareError


def _pairs(values: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in values:
        if "=" not in item:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE, e.g. bind.wait_s=5")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


@click.command("scheduler")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="YAML configuration file (see docs/scheduler.md).",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override one setting by its dotted path, e.g. --set bind.wait_s=5.",
)
@click.option("--port", type=int, help="HTTPS port of the extender and webhook (server.port).")
@click.option("--metrics-port", type=int, help="Plain-HTTP port of /metrics and probes.")
@click.option("--scheduler-name", help="schedulerName the webhook sets (scheduler_name).")
@click.option("--tls-cert", type=click.Path(path_type=Path), help="Serving certificate (PEM).")
@click.option("--tls-key", type=click.Path(path_type=Path), help="Its private key (PEM).")
@click.option("--kubeconfig", type=click.Path(path_type=Path), help="Kubeconfig file.")
@click.option("--server", "api_server", help="API server URL used without credentials.")
@click.option("--leader-elect/--no-leader-elect", default=None, help="Lease leader election.")
@click.option(
    "--web/--no-web",
    "web",
    default=None,
    help="Serve the read-only web view of the fleet (web.enabled; docs/web-view.md).",
)
@click.option("--web-port", type=int, help="Port of the web view (web.port, default 9396).")
@click.option("--web-host", help="Address the web view listens on (web.host, default 127.0.0.1).")
@click.option("--print-config", is_flag=True, help="Print the effective configuration and exit.")
def command(
    config_file: Path | None,
    settings: tuple[str, ...],
    port: int | None,
    metrics_port: int | None,
    scheduler_name: str | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    kubeconfig: Path | None,
    api_server: str | None,
    leader_elect: bool | None,
    web: bool | None,
    web_port: int | None,
    web_host: str | None,
    print_config: bool,
) -> None:
    """Run the scheduler extender and the admission webhook."""
    from xpushare.scheduler.config import load_config

    overrides: dict[str, Any] = _pairs(settings)
    for key, value in (
        ("server.port", port),
        ("server.metrics_port", metrics_port),
        ("scheduler_name", scheduler_name),
        ("tls.cert_file", tls_cert),
        ("tls.key_file", tls_key),
        ("kube.kubeconfig", kubeconfig),
        ("kube.server", api_server),
        ("leader.enabled", leader_elect),
        ("web.enabled", web),
        ("web.port", web_port),
        ("web.host", web_host),
    ):
        if value is not None:
            overrides[key] = value
    config = load_config(config_file, overrides=overrides)
    if print_config:
        click.echo(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
        return
    logging.getLogger().setLevel(config.log_level.upper())
    from xpushare.scheduler.eventloop import run

    run(_run(config), config.server.event_loop)


async def _run(config: Any) -> None:
    from xpushare.plugins import PluginHost
    from xpushare.scheduler.app import Scheduler
    from xpushare.scheduler.kube import Kube, kube_settings

    kube = await Kube.connect(kube_settings(config.kube))
    host = PluginHost.from_environment(vendor_config=config.vendors)
    scheduler = Scheduler(config, host=host, kube=kube)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await scheduler.start()
        logging.getLogger(__name__).warning(
            "xpushare scheduler %s serving on ports %s", scheduler.identity, scheduler.ports
        )
        await stop.wait()
    except XpushareError:
        raise
    finally:
        await scheduler.stop()
        await kube.close()

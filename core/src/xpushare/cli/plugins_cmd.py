"""``xpushare plugins``: what loaded, from which distribution, and why something did not."""

import json

import click
from rich.console import Console
from rich.table import Table

from xpushare.plugins import PluginHost, PluginState

_STYLE = {PluginState.LOADED: "green", PluginState.FAILED: "red", PluginState.BLOCKED: "yellow"}


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per plugin, as a list.")
def command(as_json: bool) -> None:
    """List vendor, extension and core plugins with their state, hooks and errors.

    Steer loading with XPUSHARE_PLUGINS (allow-list), XPUSHARE_DISABLE_PLUGINS (deny-list),
    XPUSHARE_STRICT_PLUGINS=1 (fail on the first broken plugin) and XPUSHARE_TRACE_HOOKS=1.
    """
    host = PluginHost.from_environment()
    if as_json:
        click.echo(json.dumps([r.as_json() for r in host.records], indent=2))
        return
    table = Table("name", "kind", "distribution", "version", "state", "hooks / error")
    for r in host.records:
        hooks = ", ".join(h.removeprefix("xpushare_") for h in r.hooks)
        table.add_row(
            r.name,
            r.kind.value,
            r.distribution or "",
            r.version or "",
            f"[{_STYLE[r.state]}]{r.state.value}[/]",
            r.error or hooks,
        )
    Console(soft_wrap=False).print(table)

"""``xpushare plugins``: what loaded, from which distribution, and why something did not.

One line per plugin that fits an 80-column terminal (the hooks counted, a failure's message
on a line of its own); ``--verbose`` lists every hook and the whole message.
"""

import json
import shutil
import textwrap

import click

from xpushare.plugins import PluginHost, PluginState

_COLUMNS = ("name", "kind", "distribution", "version", "state", "hooks")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per plugin, as a list.")
@click.option("-v", "--verbose", is_flag=True, help="Every hook and the whole error message.")
def command(as_json: bool, verbose: bool) -> None:
    """List vendor, extension and core plugins with their state, hooks and errors.

    Steer loading with XPUSHARE_PLUGINS (allow-list), XPUSHARE_DISABLE_PLUGINS (deny-list),
    XPUSHARE_STRICT_PLUGINS=1 (fail on the first broken plugin) and XPUSHARE_TRACE_HOOKS=1.
    """
    host = PluginHost.from_environment()
    if as_json:
        click.echo(json.dumps([r.as_json() for r in host.records], indent=2))
        return
    width = shutil.get_terminal_size((80, 24)).columns
    rows = [
        (
            r.name,
            r.kind.value,
            r.distribution or "",
            r.version or "",
            r.state.value,
            str(len(r.hooks)) if r.state == PluginState.LOADED else "-",
        )
        for r in host.records
    ]
    # Name and distribution give way first on a narrow terminal (cut with "…").
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(_COLUMNS)]
    widths[0] = min(widths[0], 22)
    widths[2] = min(widths[2], 22)

    def show(line: tuple[str, ...]) -> None:
        cells = [_cut(v, w).ljust(w) for v, w in zip(line, widths, strict=True)]
        click.echo(_cut("  ".join(cells).rstrip(), width))

    show(_COLUMNS)
    for record, row in zip(host.records, rows, strict=True):
        show(row)
        if record.error:
            text = f"  error: {' '.join(record.error.split())}"
            if verbose:
                click.echo(textwrap.fill(text, width, subsequent_indent="    "))
            else:
                click.echo(_cut(text, width))
        if verbose and record.hooks:
            hooks = ", ".join(h.removeprefix("xpushare_") for h in record.hooks)
            click.echo(textwrap.fill(f"  hooks: {hooks}", width, subsequent_indent="    "))

"""The ``xpushare`` console script: one click group, one module per command.

Commands import their heavy dependencies (the Kubernetes client, gRPC, matplotlib) inside
the command body, so ``xpushare --help`` and ``xpushare plugins`` stay fast.
"""

import importlib
import importlib.metadata
import logging
from typing import Any

import click

from xpushare.errors import XpushareError

#: Command name -> its module, imported only when that command runs (or help lists them):
#: the node agent, which has a 64 MiB budget, must not load the scheduler's or the
#: simulator's imports, nor rich for ``detect``'s table.
COMMANDS = {
    "plugins": "plugins_cmd",
    "detect": "detect_cmd",
    "node": "node_cmd",
    "scheduler": "scheduler_cmd",
    "fit": "fit_cmd",
    "simulate": "simulate_cmd",
}


#: Columns of every command's help however wide the terminal: a standard terminal's 80,
#: which the command line's other output (detect, plugins) keeps to as well.
HELP_WIDTH = 80


class _Group(click.Group):
    """Shows our own errors as one clear line (they are written for people) instead of a
    traceback; anything else is a bug and keeps its traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            module = importlib.import_module(f"xpushare.cli.{COMMANDS[cmd_name]}")
            self.add_command(module.command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except XpushareError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": HELP_WIDTH},
)
@click.version_option(importlib.metadata.version("xpushare"), prog_name="xpushare")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
    help="Verbosity of the log on stderr.",
)
def main(log_level: str) -> None:
    """Share GPUs and other accelerators between Kubernetes pods.

    \b
    Operators:  plugins   which vendor plugins loaded, and why not
                detect    which devices this machine has, per vendor
                fit       explain whether a pod fits a node, and why not
                simulate  replay a workload against a simulated fleet
    Services:   scheduler the kube-scheduler extender and admission webhook
                node      the node agent (device plugins, Allocate, metrics)
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

"""The ``xpushare`` console script: one click group, one module per command.

Commands import their heavy dependencies (the Kubernetes client, gRPC, matplotlib) inside
the command body, so ``xpushare --help`` and ``xpushare plugins`` stay fast.
"""

import importlib.metadata
import logging
from typing import Any

import click

from xpushare.cli import detect_cmd, fit_cmd, node_cmd, plugins_cmd, scheduler_cmd, simulate_cmd
from xpushare.errors import XpushareError


class _Group(click.Group):
    """Shows our own errors as one clear line (they are written for people) instead of a
    traceback; anything else is a bug and keeps its traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except XpushareError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(
    cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
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


main.add_command(plugins_cmd.command)
main.add_command(detect_cmd.command)
main.add_command(node_cmd.command)
main.add_command(scheduler_cmd.command)
main.add_command(fit_cmd.command)
main.add_command(simulate_cmd.command)

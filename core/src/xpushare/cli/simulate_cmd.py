"""``xpushare simulate``: replay a workload against a simulated fleet, compare policies.

With no arguments it replays the openb sample that ships inside the core under the FGD
paper's protocol and prints how much of the fleet each policy fills. Progress goes to
stderr; with ``--json`` stdout holds nothing but the JSON document.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from xpushare.placement import PlacementConfig
from xpushare.scheduling import DEFAULT_POLICY
from xpushare.simulator.datasets import TRACES

DEFAULT_POLICIES = ",".join(dict.fromkeys(["best-fit", "fgd", DEFAULT_POLICY]))


def _policies(value: str) -> list[str]:
    names = [p.strip() for p in value.split(",") if p.strip()]
    if not names:
        raise click.BadParameter("name at least one policy")
    return list(dict.fromkeys(names))


@click.command("simulate")
@click.option(
    "--trace",
    type=click.Choice(TRACES),
    help="A full openb trace by name (files from --data-dir). Default: the embedded sample.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory of the openb CSV files (default: $XPUSHARE_OPENB_DIR or shared/data/openb).",
)
@click.option(
    "--nodes",
    "nodes_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Fleet file: an openb node CSV or our YAML/JSON 'nodes:' list (.gz accepted).",
)
@click.option(
    "--pods",
    "pods_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Workload file: an openb pod CSV or our YAML/JSON 'tasks:' list (.gz accepted).",
)
@click.option(
    "--policy",
    "policy_list",
    default=DEFAULT_POLICIES,
    show_default=True,
    help="Comma-separated placement policies to compare.",
)
@click.option("--seed", default=42, show_default=True, help="Seed of the arrival order.")
@click.option(
    "--repeat", default=1, show_default=True, type=click.IntRange(1), help="Seeds seed..seed+N-1."
)
@click.option(
    "--inflation",
    default=1.3,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Arrivals are drawn until demand reaches this multiple of capacity (paper: 1.3).",
)
@click.option(
    "--target",
    default=100.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Stop when arrived GPU demand reaches this percent of capacity.",
)
@click.option(
    "--tie-break",
    type=click.Choice(["first", "random"]),
    default="first",
    show_default=True,
    help="Among equally good nodes: the first in the fleet's order, or a seeded random one"
    " per decision.",
)
@click.option(
    "--node-order",
    type=click.Choice(["seeded", "listed"]),
    default="seeded",
    show_default=True,
    help="The fleet's order, which decides ties: random drawn from each seed (the FGD"
    " authors' simulator: random node names, first name wins), or as the fleet file lists it.",
)
@click.option(
    "--mig",
    "mig_list",
    default="",
    metavar="MODELS",
    help="Comma-separated GPU models (A100) whose GPUs are in dynamic MIG mode instead of"
    " shared by HAMi-core: each task gets the smallest MIG instance that holds it, placed in"
    " the GPU's real geometry (needs xpushare[nvidia]). Compare with a run without it.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Draw allocation against arrived demand per policy to this PNG (needs xpushare[plot]).",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def command(
    trace: str | None,
    data_dir: Path | None,
    nodes_path: Path | None,
    pods_path: Path | None,
    policy_list: str,
    seed: int,
    repeat: int,
    inflation: float,
    target: float,
    tie_break: str,
    node_order: str,
    mig_list: str,
    as_json: bool,
    plot_path: Path | None,
    quiet: bool,
) -> None:
    """Replay a workload against a simulated fleet and compare placement policies.

    \b
    The protocol is the FGD paper's (Weng et al., USENIX ATC'23): tasks of the trace arrive
    in a seeded random order, inflated with random repeats to --inflation x capacity, and
    never leave; the result is the share of the fleet's GPUs allocated when arrived demand
    reaches --target % of capacity, with unallocated GPUs, fragmentation and failures.

    \b
    Examples:
      xpushare simulate                               # embedded openb sample, 3 policies
      xpushare simulate --trace default --repeat 3    # full trace, seeds 42-44
      xpushare simulate --nodes fleet.yaml --pods tasks.yaml --policy binpack,spread
      xpushare simulate --mig A100                    # A100s cut by MIG, not shared
    """
    from xpushare.plugins import PluginHost
    from xpushare.simulator import Simulation, TraceError, datasets, read_nodes, read_tasks
    from xpushare.simulator.report import plot, summarize

    policies = _policies(policy_list)
    if plot_path is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.ClickException(
                "--plot needs matplotlib: pip install 'xpushare[plot]' (or uv sync --extra plot)"
            ) from None
    if trace and (nodes_path or pods_path):
        raise click.UsageError("give either --trace or --nodes/--pods, not both")
    try:
        if trace:
            nodes_path, pods_path = datasets.trace_files(trace, data_dir)
            source = f"openb {trace} ({pods_path.parent})"
            short = f"openb {trace}"
        else:
            if nodes_path is None and pods_path is None:
                source = "embedded openb sample (of the default trace)"
                short = "openb sample"
            else:
                source = f"{nodes_path or 'embedded nodes'} / {pods_path or 'embedded tasks'}"
                short = (pods_path or nodes_path or Path("fleet")).name
            nodes_path = nodes_path or datasets.SAMPLE_NODES
            pods_path = pods_path or datasets.SAMPLE_PODS
        nodes = read_nodes(nodes_path)
        tasks = read_tasks(pods_path)
    except (TraceError, FileNotFoundError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None

    host = PluginHost.from_environment()
    config = PlacementConfig.model_validate({"tie_break": tie_break, "seed": seed})
    try:
        sim = Simulation(
            nodes,
            tasks,
            host=host,
            config=config,
            inflation=inflation,
            target=target / 100,
            node_order="listed" if node_order == "listed" else "seeded",
            mig_models=[m.strip() for m in mig_list.split(",") if m.strip()],
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None

    seeds = list(range(seed, seed + repeat))
    err = Console(stderr=True)
    runs = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=quiet or (as_json and not err.is_terminal),
        transient=True,
    ) as progress:
        for s in seeds:
            for name in policies:
                task = progress.add_task(f"{name} (seed {s})", total=1)

                def step(done: int, total: int, task: Any = task) -> None:
                    progress.update(task, completed=done, total=total)

                try:
                    runs.append(sim.run(name, seed=s, progress=step))
                except ValueError as exc:
                    raise click.ClickException(str(exc)) from None
                progress.remove_task(task)

    summaries = summarize(runs)
    title = f"{source}: {len(nodes)} nodes, {sim.capacity} GPUs, {len(tasks)} tasks"
    if plot_path is not None:
        try:
            plot(runs, plot_path, title=f"{short}: {len(nodes)} nodes, {sim.capacity} GPUs")
        except (RuntimeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        document = {
            "source": source,
            "fleet": {"nodes": len(nodes), "gpus": sim.capacity},
            "workload": {
                "tasks": len(tasks),
                "gpu_demand": round(sum(t.gpus for t in tasks), 3),
                "shapes": [
                    {"shape": what, "weight": round(w, 4)} for what, w in sim.workload.describe()
                ],
            },
            "protocol": {
                "seeds": seeds,
                "inflation": inflation,
                "target_percent": target,
                "tie_break": tie_break,
                "node_order": node_order,
            },
            "summary": [s.to_json() for s in summaries],
            "runs": [r.to_json() for r in runs],
        }
        if plot_path is not None:
            document["plot"] = str(plot_path)
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    _print_table(title, summaries, seeds, target, plot_path)


def _print_table(
    title: str, summaries: list[Any], seeds: list[int], target: float, plot_path: Path | None
) -> None:
    console = Console(highlight=False)
    seeds_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"mean of seeds {seeds[0]}-{seeds[-1]}"
    table = Table(title=f"{title}\n{seeds_text}, arrived demand {target:g}% of capacity")
    table.add_column("policy")
    table.add_column("GPUs allocated", justify="right")
    table.add_column("unallocated", justify="right")
    table.add_column("fragmented", justify="right")
    table.add_column("tasks placed", justify="right")
    table.add_column("s/run", justify="right")
    best = max(s.allocation_percent for s in summaries)
    for s in summaries:
        alloc = f"{s.allocation_percent:.2f}%"
        if len(seeds) > 1:
            alloc += f" ({s.allocation_min:.2f}-{s.allocation_max:.2f})"
        if s.allocation_percent == best:
            alloc = f"[bold green]{alloc}[/]"
        table.add_row(
            s.policy,
            alloc,
            f"{s.unallocated_gpus:.1f} GPUs",
            f"{s.fragmentation_gpus:.1f} GPUs",
            f"{s.tasks_placed:g}/{s.tasks_arrived:g}",
            f"{s.seconds:.1f}",
        )
    console.print(table)
    console.print("Tasks that found no node, by the reason most nodes gave:")
    for s in summaries:
        failures = "; ".join(f"{n:g} {why}" for why, n in s.failures.items()) or "none"
        console.print(f"  {s.policy}: {failures}")
    if plot_path is not None:
        console.print(f"Plot written to {plot_path}")

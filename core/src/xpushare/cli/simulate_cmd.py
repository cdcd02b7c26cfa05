"""``xpushare simulate``: replay a workload against a simulated fleet, compare policies.

With no arguments it replays the openb sample that ships inside the core under the FGD
paper's protocol and prints how much of the fleet each policy fills. Progress goes to
stderr; with ``--json`` stdout holds nothing but the JSON document.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from xpushare.scheduling import DEFAULT_POLICY
from xpushare.simulator.datasets import TRACES

if TYPE_CHECKING:
    from xpushare.simulator import Simulation

DEFAULT_POLICIES = ",".join(dict.fromkeys(["best-fit", "fgd", DEFAULT_POLICY]))


def _policies(value: str) -> list[str]:
    names = [p.strip() for p in value.split(",") if p.strip()]
    if not names:
        raise click.BadParameter("name at least one policy")
    return list(dict.fromkeys(names))


def _traces(value: str | None) -> list[str]:
    if value is None:
        return []
    names = [t.strip() for t in value.split(",") if t.strip()]
    if names == ["all"]:
        return list(TRACES)
    unknown = [t for t in names if t not in TRACES]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown trace {', '.join(map(repr, unknown)) or 'list'}; known: all, "
            + ", ".join(TRACES),
            param_hint="--trace",
        )
    return list(dict.fromkeys(names))


@click.command("simulate")
@click.option(
    "--trace",
    "trace_list",
    metavar="NAME[,NAME...]|all",
    help="Full openb traces by name, comma-separated, or all 17 (files from --data-dir)."
    " Default: the embedded sample.",
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
    help="Draw allocation against arrived demand per policy to this PNG (needs xpushare[plot]);"
    " with --reference and several traces, the deltas to the reference's FGD.",
)
@click.option(
    "--reference",
    "reference_path",
    is_flag=False,
    flag_value="shipped",
    metavar="[FILE]",
    help="Print our figures beside a reference table (trace, policy, seed,"
    " alloc_pct_at_arrived_<percent>) with deltas; bare --reference: the FGD authors'"
    " published results, shipped with xpushare. Needs --trace.",
)
@click.option(
    "--jobs",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Replays (traces x seeds x policies) run at once, each in a process of its own.",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def command(
    trace_list: str | None,
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
    reference_path: str | None,
    jobs: int,
    quiet: bool,
) -> None:
    """Replay a workload against a simulated fleet and compare placement policies.

    The protocol is the FGD paper's (Weng et al., USENIX ATC'23): tasks of the trace arrive
    in a seeded random order, inflated with random repeats to --inflation x capacity, and
    never leave; the result is the share of the fleet's GPUs allocated when arrived demand
    reaches --target % of capacity, with unallocated GPUs, fragmentation and failures.

    \b
    Examples:
      xpushare simulate                             # embedded openb sample
      xpushare simulate --trace default --repeat 3  # seeds 42-44
      xpushare simulate --nodes fleet.yaml --pods tasks.yaml \\
          --policy binpack,spread
      xpushare simulate --mig A100                  # A100s cut by MIG
      xpushare simulate --trace all --repeat 10 --policy fgd,fgd-cpu \\
          --reference --jobs 2
    """
    from xpushare.placement.placer import policy_registry
    from xpushare.simulator import TraceError, datasets
    from xpushare.simulator.batch import Job, Setup, run_jobs
    from xpushare.simulator.reference import seed_text

    policies = _policies(policy_list)
    traces = _traces(trace_list)
    if plot_path is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.ClickException(
                "--plot needs matplotlib: pip install 'xpushare[plot]' (or uv sync --extra plot)"
            ) from None
        if len(traces) > 1 and reference_path is None:
            raise click.UsageError(
                "--plot draws one trace's curves, or with --reference the deltas of several"
            )
    if traces and (nodes_path or pods_path):
        raise click.UsageError("give either --trace or --nodes/--pods, not both")
    if reference_path is not None and not traces:
        raise click.UsageError("--reference compares published traces: give --trace")
    reference = None
    if reference_path is not None:
        reference = _load_reference(reference_path, target)

    sources: list[_Source] = []
    try:
        if traces:
            for trace in traces:
                nodes_file, pods_file = datasets.trace_files(trace, data_dir)
                sources.append(
                    _Source(
                        trace,
                        f"openb {trace} ({pods_file.parent})",
                        f"openb {trace}",
                        nodes_file,
                        pods_file,
                    )
                )
        else:
            if nodes_path is None and pods_path is None:
                source = "embedded openb sample (of the default trace)"
                short = "openb sample"
            else:
                source = f"{nodes_path or 'embedded nodes'} / {pods_path or 'embedded tasks'}"
                short = (pods_path or nodes_path or Path("fleet")).name
            sources.append(
                _Source(
                    "",
                    source,
                    short,
                    nodes_path or datasets.SAMPLE_NODES,
                    pods_path or datasets.SAMPLE_PODS,
                )
            )
    except (TraceError, FileNotFoundError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None

    setups = {
        src.label: Setup(
            nodes=src.nodes_file.resolve(),
            pods=src.pods_file.resolve(),
            inflation=inflation,
            target=target / 100,
            node_order=node_order,
            tie_break=tie_break,
            config_seed=seed,
            mig_models=tuple(m.strip() for m in mig_list.split(",") if m.strip()),
        )
        for src in sources
    }
    # Every file, policy name and the protocol are checked here, before any worker starts.
    try:
        for src in sources:
            src.sim = setups[src.label].build()

    except (TraceError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    registry = policy_registry(sources[0].built.host)
    for name in policies:
        try:
            registry.create(name, sources[0].built.config.policy_options)
        except ValueError as exc:
            # A name the command line got wrong: a usage error (exit 2), as --trace's.
            raise click.BadParameter(str(exc), param_hint="--policy") from None

    seeds = list(range(seed, seed + repeat))
    batch = [Job(src.label, name, s) for src in sources for s in seeds for name in policies]
    err = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=quiet or (as_json and not err.is_terminal),
        transient=True,
    ) as progress:
        bar = progress.add_task(
            f"{len(batch)} replay{'s' if len(batch) != 1 else ''}"
            f" ({len(sources)} trace{'s' if len(sources) != 1 else ''} x {len(seeds)}"
            f" seed{'s' if len(seeds) != 1 else ''} x {len(policies)}"
            f" polic{'ies' if len(policies) != 1 else 'y'}, {jobs} at a time)",
            total=len(batch),
        )

        def step(done: float, total: int) -> None:
            progress.update(bar, completed=done, total=total)

        try:
            runs = run_jobs(
                setups,
                batch,
                workers=jobs,
                progress=step,
                built={src.label: src.built for src in sources},
            )
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None

    per_source = [
        (src, [r for j, r in zip(batch, runs, strict=True) if j.trace == src.label])
        for src in sources
    ]
    comparisons = []
    if reference is not None:
        from xpushare.simulator.reference import compare

        for src, rs in per_source:
            ours: dict[str, dict[int, float]] = {}
            for r in rs:
                ours.setdefault(r.policy, {})[r.seed] = r.allocation_ratio
            comparisons.extend(compare(reference[0], src.label, ours, reference[1]))
    if plot_path is not None and len(per_source) > 1:
        from xpushare.simulator.report import plot_deltas

        try:
            plot_deltas(
                comparisons,
                plot_path,
                title=f"GPUs allocated at {target:g}% arrived demand, ours minus the FGD"
                f" authors' FGD (seeds {seed_text(seeds)})",
            )
        except (RuntimeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
    elif plot_path is not None:
        from xpushare.simulator.report import plot

        src, rs = per_source[0]
        try:
            plot(
                rs,
                plot_path,
                title=f"{src.short}: {len(src.built.nodes)} nodes, {src.built.capacity} GPUs",
            )
        except (RuntimeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
    protocol = {
        "seeds": seeds,
        "inflation": inflation,
        "target_percent": target,
        "tie_break": tie_break,
        "node_order": node_order,
    }
    if as_json:
        documents = [_document(src, rs, protocol) for src, rs in per_source]
        document: dict[str, Any] = (
            documents[0] if len(documents) == 1 else {"protocol": protocol, "traces": documents}
        )
        if plot_path is not None:
            document["plot"] = str(plot_path)
        if reference is not None:
            document["reference"] = {
                "source": reference[0].source,
                "arrived_percent": reference[1],
                "rows": [c.to_json() for c in comparisons],
            }
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    from xpushare.simulator.report import summarize

    if reference is None or len(per_source) == 1:
        for src, rs in per_source:
            title = (
                f"{src.source}: {len(src.built.nodes)} nodes, {src.built.capacity} GPUs, "
                f"{len(src.built.tasks)} tasks"
            )
            _print_table(title, summarize(rs), seeds, target, plot_path, len(src.built.tasks))
    if reference is not None:
        _print_reference(comparisons, reference[0].source, target, per_source)


@dataclass
class _Source:
    """One workload of the command: a published trace (label = its name) or files."""

    label: str
    source: str
    short: str
    nodes_file: Path
    pods_file: Path
    sim: Simulation | None = None

    @property
    def built(self) -> Simulation:
        assert self.sim is not None, "the simulation is built before any replay"
        return self.sim


def _load_reference(path: str, target: float) -> tuple[Any, int]:
    from xpushare.simulator import TraceError
    from xpushare.simulator.reference import load_reference, target_point

    try:
        ref = load_reference(None if path == "shipped" else Path(path))
        return ref, target_point(ref, target)
    except (TraceError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


def _document(src: _Source, runs: list[Any], protocol: dict[str, Any]) -> dict[str, Any]:
    from xpushare.simulator.report import summarize

    sim = src.built
    return {
        "source": src.source,
        **({"trace": src.label} if src.label else {}),
        "fleet": {"nodes": len(src.built.nodes), "gpus": sim.capacity},
        "workload": {
            "tasks": len(src.built.tasks),
            "gpu_demand": round(sum(t.gpus for t in src.built.tasks), 3),
            "shapes": [
                {"shape": what, "weight": round(w, 4)} for what, w in sim.workload.describe()
            ],
        },
        "protocol": protocol,
        "summary": [s.to_json() for s in summarize(runs)],
        "runs": [r.to_json() for r in runs],
    }


def _delta(x: float | None) -> str:
    if x is None:
        return "-"
    text = f"{x:+.2f}"
    return f"[green]{text}[/]" if x >= 0 else f"[red]{text}[/]"


def _print_reference(
    rows: list[Any], source: str, target: float, per_source: list[tuple[_Source, list[Any]]]
) -> None:
    from statistics import fmean

    from xpushare.simulator.reference import seed_text

    console = Console(highlight=False)
    table = Table(
        title=f"GPUs allocated (% of capacity) at {target:g}% arrived demand, beside {source}"
        "\n(theirs: the same algorithm where they have it (fgd: FGD, best-fit: BestFit);"
        " means over the same seeds)"
    )
    for col in ("trace", "policy", "seeds", "ours", "theirs", "Δ", "their FGD", "Δ FGD"):
        table.add_column(col, justify="left" if col in ("trace", "policy", "seeds") else "right")
    seconds = {src.label: fmean(r.seconds for r in rs) for src, rs in per_source if rs}
    for c in rows:
        theirs = "-" if c.theirs is None else f"{c.theirs:.2f}"
        fgd = "-" if c.their_fgd is None else f"{c.their_fgd:.2f}"
        table.add_row(
            c.trace,
            c.policy,
            seed_text(c.seeds),
            f"{c.ours:.2f}",
            theirs,
            _delta(c.delta),
            fgd,
            _delta(c.delta_fgd),
        )
    console.print(table)
    by_policy: dict[str, list[Any]] = {}
    for c in rows:
        by_policy.setdefault(c.policy, []).append(c)
    for policy, cs in by_policy.items():
        deltas = [c.delta_fgd for c in cs if c.delta_fgd is not None]
        if not deltas:
            continue
        below = sum(1 for d in deltas if d < 0)
        console.print(
            f"  {policy}: mean Δ to their FGD {fmean(deltas):+.2f} over {len(deltas)} trace(s),"
            f" {below} below it, worst {min(deltas):+.2f}"
        )
    if seconds:
        console.print(
            "  seconds per replay: " + ", ".join(f"{label} {s:.1f}" for label, s in seconds.items())
        )


def _print_table(
    title: str,
    summaries: list[Any],
    seeds: list[int],
    target: float,
    plot_path: Path | None,
    trace_tasks: int,
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
    # The arrivals are not the trace's tasks: the FGD protocol draws them from the trace with
    # repeats until the arrived demand reaches the target (docs/simulator.md).
    console.print(
        f"Tasks placed of those that arrived: drawn from the trace's {trace_tasks} with "
        f"repeats (--inflation) until arrived GPU demand reached {target:g}% of capacity "
        "(--target)."
    )
    console.print("Tasks that found no node, by the reason most nodes gave:")
    for s in summaries:
        failures = "; ".join(f"{n:g} {why}" for why, n in s.failures.items()) or "none"
        console.print(f"  {s.policy}: {failures}")
    if plot_path is not None:
        console.print(f"Plot written to {plot_path}")

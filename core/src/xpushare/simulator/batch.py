"""Many replays at once: traces x seeds x policies, in parallel processes.

A replay is single-threaded Python, so the table of 17 traces x 10 seeds x a few policies is
run in worker processes (``xpushare simulate --jobs N``). Each worker builds the
:class:`~xpushare.simulator.Simulation` of a trace once and keeps it for the next job of that
trace; results come back in the order the jobs were given, whatever order they finish in,
so a table is the same for any number of workers. Workers report how far their replay is
on one queue, so the caller can draw one progress bar.
"""

from __future__ import annotations

import multiprocessing
import queue
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xpushare.simulator.engine import RunResult, Simulation

#: Simulations a worker keeps (one per trace it has run): a Simulation holds its fleet and
#: tasks, a few MB for an openb trace; jobs are handed out trace by trace, so a handful is
#: enough to build each trace about once per worker.
WORKER_SIMULATIONS = 4
#: How often a replay reports its progress, in tasks (the engine's own step).
PROGRESS_POLL_S = 0.25

#: (done, total) over all jobs: the sum of each job's completed fraction, and the job count.
BatchProgress = Callable[[float, int], None]


@dataclass(frozen=True, slots=True)
class Setup:
    """What a worker needs to build a trace's Simulation (picklable, hashable)."""

    nodes: Path
    pods: Path
    inflation: float
    target: float
    node_order: str
    tie_break: str
    config_seed: int
    #: GPU models served in dynamic MIG mode (``--mig``).
    mig_models: tuple[str, ...] = ()

    def build(self) -> Simulation:
        from xpushare.placement import PlacementConfig
        from xpushare.plugins import PluginHost
        from xpushare.simulator.trace import read_nodes, read_tasks

        config = PlacementConfig.model_validate(
            {"tie_break": self.tie_break, "seed": self.config_seed}
        )
        return Simulation(
            read_nodes(self.nodes),
            read_tasks(self.pods),
            host=PluginHost.from_environment(),
            config=config,
            inflation=self.inflation,
            target=self.target,
            node_order="listed" if self.node_order == "listed" else "seeded",
            mig_models=self.mig_models,
        )


@dataclass(frozen=True, slots=True)
class Job:
    """One replay: a trace (by its label), a policy and a seed."""

    trace: str
    policy: str
    seed: int


_simulations: OrderedDict[Setup, Simulation] = OrderedDict()
_reports: Any = None  # the worker's end of the progress queue


def _simulation(setup: Setup) -> Simulation:
    sim = _simulations.get(setup)
    if sim is None:
        sim = _simulations[setup] = setup.build()
        while len(_simulations) > WORKER_SIMULATIONS:
            _simulations.popitem(last=False)
    else:
        _simulations.move_to_end(setup)
    return sim


def _init_worker(reports: Any) -> None:
    global _reports
    _reports = reports


def _run(index: int, setup: Setup, job: Job) -> RunResult:
    sim = _simulation(setup)

    def step(done: int, total: int) -> None:
        if _reports is not None and total:
            _reports.put((index, done / total))

    return sim.run(job.policy, seed=job.seed, progress=step)


def run_jobs(
    setups: dict[str, Setup],
    jobs: Sequence[Job],
    workers: int = 1,
    progress: BatchProgress | None = None,
    built: dict[str, Simulation] | None = None,
) -> list[RunResult]:
    """Run *jobs* (``setups`` by trace label) on *workers* processes; results in job order.

    ``workers == 1`` runs them here, one after the other, on the simulations in *built*
    where the caller has them. A job that raises stops the batch with its exception (the
    rest are cancelled).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    missing = sorted({j.trace for j in jobs} - setups.keys())
    if missing:
        raise ValueError(f"no setup for trace(s) {', '.join(missing)}")
    fractions = [0.0] * len(jobs)

    def report() -> None:
        if progress is not None:
            progress(sum(fractions), len(jobs))

    if workers == 1 or len(jobs) <= 1:
        results = []
        for i, job in enumerate(jobs):

            def step(done: int, total: int, i: int = i) -> None:
                fractions[i] = done / total if total else 1.0
                report()

            sim = (built or {}).get(job.trace) or _simulation(setups[job.trace])
            results.append(sim.run(job.policy, job.seed, step))
            fractions[i] = 1.0
            report()
        return results

    # spawn, not fork: the caller may hold threads (rich's progress refresher) and locks.
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    out: list[RunResult | None] = [None] * len(jobs)
    with ProcessPoolExecutor(
        max_workers=min(workers, len(jobs)),
        mp_context=context,
        initializer=_init_worker,
        initargs=(reports,),
    ) as pool:
        pending: dict[Future[RunResult], int] = {
            pool.submit(_run, i, setups[job.trace], job): i for i, job in enumerate(jobs)
        }
        try:
            while pending:
                done, _ = wait(pending, timeout=PROGRESS_POLL_S, return_when=FIRST_COMPLETED)
                _drain(reports, fractions)
                for future in done:
                    i = pending.pop(future)
                    out[i] = future.result()
                    fractions[i] = 1.0
                report()
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return [r for r in out if r is not None]


def _drain(reports: Any, fractions: list[float]) -> None:
    while True:
        try:
            index, fraction = reports.get_nowait()
        except queue.Empty:
            return
        if fractions[index] < 1.0:
            fractions[index] = fraction

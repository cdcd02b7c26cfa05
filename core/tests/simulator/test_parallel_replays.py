"""``simulate --jobs N``: replays in worker processes give the table one process gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from xpushare.cli.main import main
from xpushare.simulator.batch import Job, Setup, run_jobs


def _files(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "fleet.yaml"
    nodes.write_text(
        "nodes:\n"
        "  - {name: t4-, count: 4, cpu_milli: 32000, memory_mib: 131072, gpus: 2, model: T4}\n"
        "  - {name: big-, count: 2, cpu_milli: 96000, memory_mib: 393216, gpus: 8, model: G2}\n"
    )
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        "tasks:\n"
        "  - {name: w-, count: 10, cpu_milli: 8000, memory_mib: 16384, num_gpu: 1,"
        " gpu_milli: 1000}\n"
        "  - {name: s-, count: 12, cpu_milli: 4000, memory_mib: 8192, num_gpu: 1, gpu_milli: 400}\n"
        "  - {name: c-, count: 4, cpu_milli: 4000, memory_mib: 8192}\n"
    )
    return nodes, tasks


def _setup(nodes: Path, tasks: Path) -> Setup:
    return Setup(nodes, tasks, 1.3, 1.0, "seeded", "first", 42)


def test_workers_return_results_in_job_order_and_report_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XPUSHARE_PLUGINS", "mock")
    nodes, tasks = _files(tmp_path)
    setups = {"a": _setup(nodes, tasks)}
    jobs = [Job("a", p, s) for s in (42, 43, 44) for p in ("fgd", "best-fit")]
    seen: list[tuple[float, int]] = []
    parallel = run_jobs(setups, jobs, workers=2, progress=lambda d, t: seen.append((d, t)))
    serial = run_jobs(setups, jobs, workers=1)
    assert [(r.policy, r.seed) for r in parallel] == [(j.policy, j.seed) for j in jobs]
    strip = [r.to_json() | {"seconds": 0, "cpu_seconds": 0} for r in parallel]
    assert strip == [r.to_json() | {"seconds": 0, "cpu_seconds": 0} for r in serial]
    assert len({r.allocation_ratio for r in parallel}) > 1  # the jobs really differ
    assert seen[-1] == (len(jobs), len(jobs))
    assert all(t == len(jobs) and 0 <= d <= len(jobs) for d, t in seen)


def test_a_failing_job_stops_the_batch_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XPUSHARE_PLUGINS", "mock")
    nodes, tasks = _files(tmp_path)
    with pytest.raises(ValueError, match="unknown placement policy 'nope'"):
        run_jobs({"a": _setup(nodes, tasks)}, [Job("a", "fgd", 42), Job("a", "nope", 42)], 2)
    with pytest.raises(ValueError, match="no setup for trace"):
        run_jobs({}, [Job("b", "fgd", 42)], 1)


def test_jobs_flag_gives_the_same_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPUSHARE_PLUGINS", "mock")
    nodes, tasks = _files(tmp_path)
    args = ["simulate", "--nodes", str(nodes), "--pods", str(tasks), "--repeat", "2", "--json"]
    runner = CliRunner()
    one = runner.invoke(main, args)
    two = runner.invoke(main, [*args, "--jobs", "2"])
    assert one.exit_code == 0 and two.exit_code == 0, one.output + two.output

    def strip(doc: dict[str, object]) -> object:
        runs = doc["runs"]
        assert isinstance(runs, list)
        return [r | {"seconds": 0, "cpu_seconds": 0} for r in runs]

    assert strip(json.loads(one.output)) == strip(json.loads(two.output))

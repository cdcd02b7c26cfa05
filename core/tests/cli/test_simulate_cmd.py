"""``xpushare simulate``: the no-argument run, JSON, the plot, and files of our own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from xpushare.cli.main import main


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("XPUSHARE_PLUGINS", "mock")
    monkeypatch.setenv("COLUMNS", "200")
    return CliRunner()


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "fleet.yaml"
    nodes.write_text(
        "nodes:\n"
        "  - {name: t4-, count: 4, cpu_milli: 32000, memory_mib: 131072, gpus: 2, model: T4}\n"
        "  - {name: big-, count: 2, cpu_milli: 96000, memory_mib: 393216, gpus: 8, model: G2}\n"
    )
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        "tasks:\n"
        "  - {name: w-, count: 10, cpu_milli: 8000, memory_mib: 16384, num_gpu: 1,\n"
        "     gpu_milli: 1000}\n"
        "  - {name: s-, count: 12, cpu_milli: 4000, memory_mib: 8192, num_gpu: 1, gpu_milli: 400}\n"
        "  - {name: m-, count: 1, cpu_milli: 16000, memory_mib: 8192, num_gpu: 4,\n"
        "     gpu_milli: 1000}\n"
        "  - {name: t-, count: 3, cpu_milli: 2000, memory_mib: 8192, num_gpu: 1, gpu_milli: 300,\n"
        "     gpu_spec: [T4]}\n"
        "  - {name: c-, count: 4, cpu_milli: 4000, memory_mib: 8192}\n"
    )
    return nodes, tasks


def test_no_arguments_replays_the_embedded_sample(runner: CliRunner) -> None:
    result = runner.invoke(main, ["simulate", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "embedded openb sample" in result.output
    for policy in ("best-fit", "fgd"):
        assert policy in result.output
    assert "GPUs allocated" in result.output and "1051 GPUs" in result.output


def test_json_has_the_summary_runs_and_curves(runner: CliRunner, tiny: tuple[Path, Path]) -> None:
    nodes, tasks = tiny
    result = runner.invoke(
        main,
        [
            "simulate",
            "--nodes",
            str(nodes),
            "--pods",
            str(tasks),
            "--policy",
            "binpack,fgd",
            "--repeat",
            "2",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)  # nothing but the JSON on stdout
    assert doc["fleet"] == {"nodes": 6, "gpus": 24}
    assert [s["policy"] for s in doc["summary"]] == ["binpack", "fgd"]
    assert [(r["policy"], r["seed"]) for r in doc["runs"]] == [
        ("binpack", 42),
        ("fgd", 42),
        ("binpack", 43),
        ("fgd", 43),
    ]
    run = doc["runs"][0]
    assert run["arrived_percent"] <= 100 and run["curve"][-1][0] == run["arrived_percent"]
    assert run["allocation_percent"] == pytest.approx(100 * run["allocated_gpus"] / 24, abs=1e-3)
    assert doc["protocol"]["seeds"] == [42, 43] and doc["protocol"]["inflation"] == 1.3


def test_plot_writes_a_png(runner: CliRunner, tiny: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, tasks = tiny
    out = tmp_path / "alloc.png"
    result = runner.invoke(
        main,
        ["simulate", "--nodes", str(nodes), "--pods", str(tasks), "--quiet", "--plot", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"Plot written to {out}" in result.output


def test_unknown_policy_and_missing_trace_directory(
    runner: CliRunner, tiny: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes, tasks = tiny
    result = runner.invoke(
        main,
        ["simulate", "--nodes", str(nodes), "--pods", str(tasks), "--policy", "nope", "--quiet"],
    )
    # A usage error (2), as an unknown --trace is; it was 1.
    assert result.exit_code == 2 and "unknown placement policy 'nope'" in result.output
    assert "--policy" in result.output
    monkeypatch.setenv("XPUSHARE_OPENB_DIR", str(tmp_path / "nowhere"))
    result = runner.invoke(main, ["simulate", "--trace", "gpuspec33"])
    assert result.exit_code == 1 and "openb_node_list_gpu_node.csv not found" in result.output


def test_help_fits_80_columns_however_wide_the_terminal(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines of ``simulate --help`` reached 89 columns."""
    monkeypatch.setenv("COLUMNS", "200")
    for command in ("simulate", "fit", "scheduler", "node", "detect", "plugins"):
        text = runner.invoke(main, [command, "--help"]).output
        assert max(map(len, text.splitlines())) <= 80, command


def test_the_table_says_its_tasks_are_arrivals_drawn_from_the_trace(
    runner: CliRunner, tiny: tuple[Path, Path]
) -> None:
    nodes, tasks = tiny
    args = ["simulate", "--nodes", str(nodes), "--pods", str(tasks), "--quiet"]
    result = runner.invoke(main, [*args, "--policy", "fgd"])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "Tasks placed of those that arrived: drawn from the trace's" in flat
    assert "with repeats (--inflation)" in flat

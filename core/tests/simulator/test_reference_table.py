"""The reference table (the FGD authors' published results) and ``simulate --reference``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from xpushare.cli.main import main
from xpushare.simulator import TraceError
from xpushare.simulator.datasets import REFERENCE_RESULTS, TRACES
from xpushare.simulator.reference import (
    MAX_REFERENCE_BYTES,
    compare,
    load_reference,
    seed_text,
    target_point,
)

HEADER = "trace,policy,seed,total_gpus,alloc_pct_at_arrived_80,alloc_pct_at_arrived_100\n"


def test_the_shipped_table_holds_every_trace_policy_and_seed() -> None:
    ref = load_reference()
    assert ref.source == str(REFERENCE_RESULTS)
    assert ref.arrived_points == [80, 90, 95, 100, 110, 130]
    policies = {"Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD"}
    for trace in TRACES:
        for policy in policies:
            assert ref.seeds(trace, policy, 100) == list(range(42, 52)), (trace, policy)
    # Their seed-42 FGD on default (reproduced by running their simulator, issue 20).
    assert ref.values[("default", "FGD", 42, 100)] == 95.14
    assert ref.mean("default", "FGD", 100, range(42, 52)) == pytest.approx(95.23, abs=0.005)


def test_comparison_uses_the_same_seeds_and_their_name_for_our_policy() -> None:
    ref = load_reference()
    rows = compare(ref, "default", {"fgd": {42: 95.0, 43: 96.0}, "binpack": {42: 90.0}}, 100)
    fgd, binpack = rows
    theirs = (ref.values[("default", "FGD", 42, 100)] + ref.values[("default", "FGD", 43, 100)]) / 2
    assert fgd.their_policy == "FGD" and fgd.theirs == pytest.approx(theirs)
    assert fgd.delta == pytest.approx(95.5 - theirs) and fgd.delta_fgd == fgd.delta
    assert fgd.their_fgd_seeds == 10
    # binpack is not one of theirs: compared with their FGD only.
    assert binpack.their_policy is None and binpack.theirs is None and binpack.delta is None
    assert binpack.delta_fgd == pytest.approx(90.0 - ref.values[("default", "FGD", 42, 100)])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty reference file"),
        ("trace,seed,alloc_pct_at_arrived_100\n", "the header lacks policy"),
        ("trace,policy,seed\n", "no alloc_pct_at_arrived_<percent> column"),
        (HEADER + "default,FGD,x,6212,80,95\n", "'seed' must be an integer, got 'x'"),
        (
            HEADER + "default,FGD,42,6212,80,nan\n",
            "'alloc_pct_at_arrived_100' must be a percentage",
        ),
        (HEADER + "default,FGD,42,6212,80,101\n", "must be a percentage, got '101'"),
        (HEADER + "default,FGD,42,6212,80\n", "5 fields, the header has 6"),
        (HEADER + "default," + "F" * 100 + ",42,6212,80,95\n", "longer than 64 characters"),
    ],
)
def test_a_malformed_table_is_refused_naming_the_row_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "ref.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=r"ref\.csv") as info:
        load_reference(path)
    assert message in str(info.value)


def test_an_oversized_table_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_bytes(HEADER.encode() + b"x" * MAX_REFERENCE_BYTES)
    with pytest.raises(TraceError, match="at most"):
        load_reference(big)
    # A small gzip that inflates past the bound: refused too, without inflating it all.
    bomb = tmp_path / "bomb.csv.gz"
    bomb.write_bytes(gzip.compress(HEADER.encode() + b"0" * (MAX_REFERENCE_BYTES + 10)))
    assert bomb.stat().st_size < MAX_REFERENCE_BYTES
    with pytest.raises(TraceError, match="uncompressed"):
        load_reference(bomb)


def test_target_must_be_a_column_of_the_table() -> None:
    ref = load_reference()
    assert target_point(ref, 100.0) == 100
    with pytest.raises(TraceError, match="--target 97 is not one of them"):
        target_point(ref, 97.0)


def test_seed_text() -> None:
    assert seed_text([44, 42, 43]) == "42-44"
    assert seed_text([42, 44]) == "42,44"


# --- the command ---------------------------------------------------------------------


@pytest.fixture
def openb_dir(tmp_path: Path) -> Path:
    """A tiny openb directory: the fleet and two named traces, in the trace's CSV format."""
    root = tmp_path / "openb"
    root.mkdir()
    (root / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"t4-{i},32000,131072,2,T4\n" for i in range(4))
        + "".join(f"g2-{i},96000,393216,8,G2\n" for i in range(2))
    )
    pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    pods += "".join(f"w{i},8000,16384,1,1000,\n" for i in range(10))
    pods += "".join(f"s{i},4000,8192,1,400,\n" for i in range(12))
    pods += "m0,16000,8192,4,1000,\n" + "".join(f"c{i},4000,8192,0,0,\n" for i in range(4))
    (root / "openb_pod_list_default.csv").write_text(pods)
    (root / "openb_pod_list_cpu050.csv").write_text(pods.replace("m0,16000", "m0,32000"))
    return root


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("XPUSHARE_PLUGINS", "mock")
    monkeypatch.setenv("COLUMNS", "200")
    return CliRunner()


def _ref_file(tmp_path: Path) -> Path:
    path = tmp_path / "theirs.csv"
    path.write_text(
        HEADER
        + "default,FGD,42,24,70.0,80.0\ndefault,FGD,43,24,71.0,90.0\n"
        + "default,BestFit,42,24,60.0,70.0\ncpu050,FGD,42,24,50.0,75.0\n"
    )
    return path


def test_reference_prints_ours_beside_theirs_with_deltas(
    runner: CliRunner, openb_dir: Path, tmp_path: Path
) -> None:
    args = ["simulate", "--data-dir", str(openb_dir), "--trace", "default,cpu050"]
    args += ["--policy", "fgd,best-fit", "--repeat", "2", "--reference", str(_ref_file(tmp_path))]
    result = runner.invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [t["trace"] for t in doc["traces"]] == ["default", "cpu050"]
    rows = {(r["trace"], r["policy"]): r for r in doc["reference"]["rows"]}
    ours = {
        (t["trace"], s["policy"]): s["allocation_percent"]
        for t in doc["traces"]
        for s in t["summary"]
    }
    fgd = rows[("default", "fgd")]
    assert fgd["seeds"] == [42, 43] and fgd["theirs"] == 85.0 and fgd["their_policy"] == "FGD"
    assert fgd["ours"] == pytest.approx(ours[("default", "fgd")], abs=1e-3)
    assert fgd["delta"] == pytest.approx(fgd["ours"] - 85.0, abs=1e-3)
    best = rows[("default", "best-fit")]
    assert best["theirs"] == 70.0  # only seed 42 is in the table: their mean over it
    assert best["delta_fgd"] == pytest.approx(best["ours"] - 85.0, abs=1e-3)
    assert rows[("cpu050", "fgd")]["theirs"] == 75.0
    assert rows[("cpu050", "best-fit")]["theirs"] is None  # they have no BestFit here

    text = runner.invoke(main, [*args, "--quiet"])
    assert text.exit_code == 0, text.output
    assert "Δ FGD" in text.output and "42-43" not in text.output  # two seeds: "42,43"
    assert f"{fgd['ours']:.2f}" in text.output and f"{fgd['delta']:+.2f}" in text.output
    assert "fgd: mean Δ to their FGD" in text.output


def test_bare_reference_is_the_shipped_table_and_needs_a_trace(
    runner: CliRunner, openb_dir: Path
) -> None:
    result = runner.invoke(main, ["simulate", "--quiet", "--reference"])
    assert result.exit_code == 2 and "--reference compares published traces" in result.output
    args = ["simulate", "--data-dir", str(openb_dir), "--trace", "default", "--policy", "fgd"]
    result = runner.invoke(main, [*args, "--reference", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["reference"]["source"] == str(REFERENCE_RESULTS)
    assert doc["reference"]["rows"][0]["theirs"] == 95.14  # their seed 42
    result = runner.invoke(main, [*args, "--reference", "--target", "97"])
    assert result.exit_code == 1 and "--target 97 is not one of them" in result.output


def test_unknown_trace_is_refused_with_the_known_ones(runner: CliRunner) -> None:
    result = runner.invoke(main, ["simulate", "--trace", "default,nope"])
    assert result.exit_code == 2 and "unknown trace 'nope'" in result.output
    assert "gpuspec33" in result.output


def test_plot_with_a_reference_draws_the_deltas_of_several_traces(
    runner: CliRunner, openb_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "deltas.png"
    args = ["simulate", "--data-dir", str(openb_dir), "--trace", "default,cpu050", "--quiet"]
    result = runner.invoke(main, [*args, "--policy", "fgd", "--plot", str(out)])
    assert result.exit_code == 2 and "with --reference the deltas" in result.output
    ref = _ref_file(tmp_path)
    result = runner.invoke(
        main, [*args, "--policy", "fgd", "--reference", str(ref), "--plot", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

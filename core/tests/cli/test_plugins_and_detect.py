"""``xpushare plugins`` and ``xpushare detect`` as an operator sees them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from xpushare.cli.main import main


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for var in ("XPUSHARE_MOCK_DEVICES", "XPUSHARE_PLUGINS", "XPUSHARE_DISABLE_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    # rich sizes tables from COLUMNS when there is no terminal.
    monkeypatch.setenv("COLUMNS", "240")
    return CliRunner()


@pytest.fixture
def mock_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Other vendor wheels may be installed beside the core; these tests are about mock."""
    monkeypatch.setenv("XPUSHARE_PLUGINS", "mock")


def test_plugins_table_lists_mock_and_core(runner: CliRunner) -> None:
    result = runner.invoke(main, ["plugins"])
    assert result.exit_code == 0, result.output
    assert "mock" in result.output and "xpushare-defaults" in result.output
    assert "loaded" in result.output


def test_plugins_json_shape(runner: CliRunner) -> None:
    result = runner.invoke(main, ["plugins", "--json"])
    records = {r["name"]: r for r in json.loads(result.output)}
    mock = records["mock"]
    assert set(mock) == {
        "name",
        "kind",
        "distribution",
        "version",
        "state",
        "hooks",
        "error",
        "resources",
    }
    assert mock["kind"] == "vendor" and mock["distribution"] == "xpushare"
    assert "xpushare_allocate" in mock["hooks"]
    assert mock["resources"][0] == "xpushare.io/mock-gpu"


def test_detect_without_mock_spec_says_why_mock_is_inactive(
    runner: CliRunner, mock_only: None
) -> None:
    result = runner.invoke(main, ["detect"])
    assert result.exit_code == 0, result.output
    assert "no devices found" in result.output
    assert "mock: inactive: no mock devices configured" in result.output


def test_detect_json_with_mock_devices(runner: CliRunner, mock_only: None) -> None:
    result = runner.invoke(
        main, ["detect", "--json"], env={"XPUSHARE_MOCK_DEVICES": "2x A100-80GB,1x T4-16GB"}
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    models = [(d["model"], d["memory_mib"], d["index"]) for d in payload["devices"]]
    assert models == [("A100-80GB", 81920, 0), ("A100-80GB", 81920, 1), ("T4-16GB", 16384, 2)]
    assert payload["vendors"] == [{"vendor": "mock", "state": "active", "devices": 3}]


def test_detect_table_with_a_device_file(
    runner: CliRunner, mock_only: None, tmp_path: Path
) -> None:
    spec = tmp_path / "devices.yaml"
    spec.write_text("devices:\n  - {model: H100, memory_mib: 81559, count: 2, numa_node: 1}\n")
    result = runner.invoke(main, ["detect"], env={"XPUSHARE_MOCK_DEVICES": str(spec)})
    assert result.exit_code == 0, result.output
    assert "H100" in result.output and "81559" in result.output
    assert "mock: active, 2 device(s)" in result.output


def test_detect_with_a_bad_spec_reports_it(runner: CliRunner, mock_only: None) -> None:
    result = runner.invoke(main, ["detect"], env={"XPUSHARE_MOCK_DEVICES": "eight A100s"})
    assert result.exit_code == 0
    assert "mock: inactive: cannot read mock device file eight A100s" in result.output

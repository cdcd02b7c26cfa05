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
    [line] = [x for x in result.output.splitlines() if x.startswith("mock ")]
    assert line.split()[:2] == ["mock", "inactive"]
    assert "no mock devices configured" in line


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
    [line] = [x for x in result.output.splitlines() if x.startswith("mock ")]
    assert line.split() == ["mock", "active", "2", "device(s)"]


def test_detect_with_a_bad_spec_reports_it(runner: CliRunner, mock_only: None) -> None:
    result = runner.invoke(main, ["detect"], env={"XPUSHARE_MOCK_DEVICES": "eight A100s"})
    assert result.exit_code == 0
    assert "mock    inactive cannot read mock device file eight A100s" in result.output
    verbose = runner.invoke(main, ["detect", "--verbose"], env={"XPUSHARE_MOCK_DEVICES": "x"})
    assert "mock: inactive: cannot read mock device file x" in verbose.output


def test_detect_is_one_line_per_vendor_within_80_columns(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every vendor installed here is absent (no accelerator): one line each, same form,
    whole (not cut at the edge) and with the vendor's next step when its message has one
    (awsneuron's line was its sysfs path and errno, cut at 80 columns)."""
    from xpushare.cli.detect_cmd import next_steps

    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(main, ["detect"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    host_vendors = json.loads(runner.invoke(main, ["detect", "--json"]).output)["vendors"]
    rows = [line for line in lines if line.split()[:1] in ([v["vendor"]] for v in host_vendors)]
    assert len(rows) == len(host_vendors)  # one line each, nothing more per vendor
    assert len(lines) == len(host_vendors) + 3  # "no devices", the header, the hint
    for row, vendor in zip(rows, host_vendors, strict=True):
        assert row.split()[1] == vendor["state"]
        assert not row.endswith("…"), row
        if vendor["state"] != "active":
            steps = next_steps(vendor["vendor"], vendor["reason"])
            shown = row.split(None, 2)[2]
            assert shown in steps, (shown, steps)
            if len(steps) > 1:  # the message says what to do: the line does too
                assert shown != steps[-1], row
    verbose = runner.invoke(main, ["detect", "--verbose"]).output
    for vendor in host_vendors:
        if vendor["state"] != "active":
            assert f"{vendor['vendor']}: {vendor['state']}: " in verbose


def test_next_step_names_the_missing_library_and_what_to_do() -> None:
    from xpushare.cli.detect_cmd import next_steps

    loader = (
        "vendor 'acme': native library not found; tried 2 path(s):\n  - /opt/acme/libacme.so.3\n"
        "      cannot open shared object file: No such file or directory"
    )
    steps = next_steps("acme", loader)
    assert steps[0] == "no libacme.so.3: install its driver or set vendors.acme.library_path"
    assert steps[-1] == "no libacme.so.3"
    own = next_steps("acme", "no device answered. Check that the acme kernel module is loaded.")
    assert own[0] == "no device answered: check that the acme kernel module is loaded"


def test_plugins_fits_80_columns_and_verbose_lists_hooks(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(main, ["plugins"])
    lines = result.output.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    records = json.loads(runner.invoke(main, ["plugins", "--json"]).output)
    mock = next(line for line in lines if line.startswith("mock "))
    assert mock.split() == [
        "mock",
        "vendor",
        "xpushare",
        "0.1.0",
        "loaded",
        str(len(records[[r["name"] for r in records].index("mock")]["hooks"])),
    ]
    verbose = runner.invoke(main, ["plugins", "--verbose"]).output
    assert all(len(line) <= 80 for line in verbose.splitlines())
    assert "allocate" in verbose and "allocate" not in result.output


def test_a_long_library_name_still_gets_a_next_step_in_80_columns() -> None:
    """nvidia's line at 80 columns said `no libnvidia-ml.so.1` and nothing to do."""
    from xpushare.cli.detect_cmd import _lines

    reason = (
        "vendor 'nvidia': native library not found; tried 2 path(s):\n  - libnvidia-ml.so.1\n"
        "      libnvidia-ml.so.1: cannot open shared object file: No such file or directory"
    )
    rows = [
        {"vendor": "enflame-drs", "state": "inactive", "reason": "x"},
        {"vendor": "nvidia", "state": "inactive", "reason": reason},
        {
            "vendor": "mock",
            "state": "inactive",
            "reason": "no mock devices configured; set XPUSHARE_MOCK_DEVICES='8x A100-80GB' "
            "or a file path",
        },
    ]
    lines = _lines(rows, 80)
    assert lines[2].endswith("no libnvidia-ml.so.1: install the driver")
    assert lines[3].endswith("no mock devices configured: set XPUSHARE_MOCK_DEVICES")
    assert all(len(line) <= 80 for line in lines)


def test_scheduler_without_a_kubeconfig_says_so_in_one_line(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """It printed a 66-line traceback ending in ConfigException ... current-context; the
    node agent said it in one line."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    result = runner.invoke(main, ["scheduler"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "cannot configure the Kubernetes client" in errors[0]
    assert "--kubeconfig" in errors[0]

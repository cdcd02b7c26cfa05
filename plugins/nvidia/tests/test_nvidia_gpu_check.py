"""The GPU check script, run against the fake NVML and a fake nvidia-smi.

On a real GPU machine the script compares the plugin with the real nvidia-smi; here both
sides are fakes, so this only proves the script's own logic: it loads the plugin the real
way, reads nvidia-smi's CSV, passes when they agree and fails on a mismatch.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from fake_nvml import FakeNvml, bus_id, uuid

SCRIPT = Path(__file__).parents[1] / "scripts" / "gpu_check.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nvidia_gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def fake_smi(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\ncat <<'CSV'\n" + "\n".join(rows) + "\nCSV\n")
    path.chmod(0o755)
    return path


def smi_row(i: int, name: str = "NVIDIA A100-SXM4-80GB", memory: int = 81920) -> str:
    return f"{uuid(i)}, {name}, {memory}, {bus_id(i)}, 0, 30, 50.00, 0, 550.54.15"


def test_agreement_passes(
    fake: FakeNvml, driver_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.add_gpus(2)
    fake.nvlink(0, 1, 2)
    smi = fake_smi(tmp_path, [smi_row(0), smi_row(1)])
    code = load_script().main(["--driver-root", str(driver_root), "--nvidia-smi", str(smi)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASSED: 0 mismatch(es)" in out
    assert "nvlinkx2" in out
    assert fake.init_count == 0


def test_a_mismatch_fails(
    fake: FakeNvml, driver_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.add_gpus(2)
    smi = fake_smi(tmp_path, [smi_row(0, memory=40960), smi_row(2)])
    code = load_script().main(["--driver-root", str(driver_root), "--nvidia-smi", str(smi)])
    out = capsys.readouterr().out
    assert code == 1
    assert "memory.total MiB" in out and "MISMATCH" in out
    # GPU 0: memory by detect and by monitor; GPU 1 and GPU 2: each seen by one side only.
    assert "FAILED: 4 mismatch(es)" in out


def test_without_nvidia_smi_it_cannot_run(tmp_path: Path) -> None:
    assert load_script().main(["--nvidia-smi", str(tmp_path / "absent")]) == 2

"""``xpushare-amd`` installs as a wheel on its own beside the core and works from the CLI.

The core and the plugin are built into wheels and installed into a fresh virtual
environment (from uv's cache, offline), as ``pip install xpushare-amd`` would: the vendor is
found through its entry point, no other vendor comes with it, ``xpushare detect`` explains
why it is inactive on a machine without ROCm, and lists the GPUs of a fake ROCm install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from amd_fakes import build_library, mi300x

# Builds two wheels and a virtual environment: about 15 s on two cores.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=120)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH; it builds the wheels and the environment")
    root = tmp_path_factory.mktemp("amd-dist")
    wheels = root / "wheels"
    for project in ("core", "plugins/amd"):
        built = _run(
            uv, "build", "--wheel", "--quiet", "--out-dir", str(wheels), str(ROOT / project)
        )
        assert built.returncode == 0, built.stderr
    env_dir = root / "venv"
    made = _run(uv, "venv", "--quiet", "--python", sys.executable, str(env_dir))
    assert made.returncode == 0, made.stderr
    python = str(env_dir / "bin" / "python")
    amd_wheel = next(wheels.glob("xpushare_amd-*.whl"))
    core_wheel = next(wheels.glob("xpushare-*.whl"))
    install = [uv, "pip", "install", "--quiet", "--python", python, str(core_wheel), str(amd_wheel)]
    done = _run(*install, "--offline")
    if done.returncode != 0:  # a dependency missing from uv's cache: fetch it
        done = _run(*install)
    assert done.returncode == 0, done.stderr
    return env_dir


def _clean_env(**extra: str) -> dict[str, str]:
    drop = ("XPUSHARE_", "ROCM_", "AMD_SMI_", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def test_the_wheel_brings_the_amd_vendor_and_nothing_else(venv: Path) -> None:
    listed = _run(
        shutil.which("uv") or "uv",
        "pip",
        "list",
        "--python",
        str(venv / "bin" / "python"),
        "--format",
        "json",
    )
    names = {p["name"] for p in json.loads(listed.stdout)}
    assert {"xpushare", "xpushare-amd", "amdsmi"} <= names
    assert not {n for n in names if n.startswith("xpushare-") and n != "xpushare-amd"}
    plugins = _run(str(venv / "bin" / "xpushare"), "plugins", "--json", env=_clean_env())
    assert plugins.returncode == 0, plugins.stderr
    amd = next(r for r in json.loads(plugins.stdout) if r["name"] == "amd")
    assert amd["state"] == "loaded" and amd["distribution"] == "xpushare-amd"
    assert amd["resources"] == [
        "amd.com/gpu",
        "amd.com/gpumem",
        "amd.com/gpumem-percentage",
        "amd.com/gpucores",
    ]


def test_detect_without_rocm_says_why_the_vendor_is_inactive(venv: Path) -> None:
    detect = _run(str(venv / "bin" / "xpushare"), "detect", env=_clean_env(XPUSHARE_PLUGINS="amd"))
    assert detect.returncode == 0, detect.stderr
    assert (
        "amd: inactive: libamd_smi.so (ROCm's AMD SMI library) could not be loaded" in detect.stdout
    )
    assert "/opt/rocm/lib/libamd_smi.so" in detect.stdout
    assert "Install ROCm's amd-smi-lib" in detect.stdout


def test_detect_lists_the_gpus_of_a_rocm_install(venv: Path, tmp_path: Path) -> None:
    build_library(tmp_path / "rocm" / "lib", [mi300x(0), mi300x(1)])
    env = _clean_env(XPUSHARE_PLUGINS="amd", ROCM_PATH=str(tmp_path / "rocm"))
    detect = _run(str(venv / "bin" / "xpushare"), "detect", "--json", env=env)
    assert detect.returncode == 0, detect.stderr
    payload = json.loads(detect.stdout)
    assert payload["vendors"] == [{"vendor": "amd", "state": "active", "devices": 2}]
    assert [d["id"] for d in payload["devices"]] == ["GPU-4d3a0f9e12ab5500", "GPU-4d3a0f9e12ab5501"]

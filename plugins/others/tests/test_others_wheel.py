"""``xpushare-others`` installs as a wheel on its own beside the core and works from the CLI.

The core and this distribution are built into wheels and installed into a fresh virtual
environment (from uv's cache where possible), as ``pip install "xpushare[others]"`` would: all
four vendors are found through their entry points, and on a machine without their libraries
``xpushare detect`` says, per vendor, that it is inactive and which paths it tried.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Builds two wheels and a virtual environment: about 15 s on two cores.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
VENDORS = ("hygon", "iluvatar", "metax", "mthreads")


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=180)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH; it builds the wheels and the environment")
    root = tmp_path_factory.mktemp("others-dist")
    wheels = root / "wheels"
    for project in ("core", "plugins/others"):
        built = _run(
            uv, "build", "--wheel", "--quiet", "--out-dir", str(wheels), str(ROOT / project)
        )
        assert built.returncode == 0, built.stderr
    env_dir = root / "venv"
    made = _run(uv, "venv", "--quiet", "--python", sys.executable, str(env_dir))
    assert made.returncode == 0, made.stderr
    python = str(env_dir / "bin" / "python")
    ours = next(wheels.glob("xpushare_others-*.whl"))
    core = next(wheels.glob("xpushare-*.whl"))
    install = [uv, "pip", "install", "--quiet", "--python", python, str(core), str(ours)]
    done = _run(*install, "--offline")
    if done.returncode != 0:  # a dependency missing from uv's cache: fetch it
        done = _run(*install)
    assert done.returncode == 0, done.stderr
    return env_dir


def _clean_env(**extra: str) -> dict[str, str]:
    drop = ("XPUSHARE_", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONPATH", "FAKE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def test_the_wheel_brings_four_vendors(venv: Path) -> None:
    plugins = _run(str(venv / "bin" / "xpushare"), "plugins", "--json", env=_clean_env())
    assert plugins.returncode == 0, plugins.stderr
    records = {r["name"]: r for r in json.loads(plugins.stdout)}
    for vendor in VENDORS:
        assert records[vendor]["state"] == "loaded", records[vendor]
        assert records[vendor]["distribution"] == "xpushare-others"
    assert records["hygon"]["resources"] == [
        "hygon.com/dcunum",
        "hygon.com/dcumem",
        "hygon.com/dcucores",
    ]


def test_detect_without_the_libraries_says_why_each_vendor_is_inactive(venv: Path) -> None:
    env = _clean_env(XPUSHARE_PLUGINS=",".join(VENDORS))
    detect = _run(str(venv / "bin" / "xpushare"), "detect", "--json", env=env)
    assert detect.returncode == 0, detect.stderr
    payload = json.loads(detect.stdout)
    states = {v["vendor"]: v for v in payload["vendors"]}
    assert {v: states[v]["state"] for v in VENDORS} == dict.fromkeys(VENDORS, "inactive")
    text = json.dumps(payload)
    for path in (
        "/opt/hyhal/lib/librocm_smi64.so",
        "/usr/local/corex/lib64/libixml.so",
        "/opt/maca/lib/libmxsml.so",
        "libmtml.so.2",
    ):
        assert path in text, path

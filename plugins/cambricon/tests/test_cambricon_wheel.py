"""``xpushare-cambricon`` installs as a wheel on its own beside the core, and works there.

The two wheels are built with ``uv build`` and installed with ``uv pip`` into a fresh virtual
environment (dependencies from the package index or uv's cache), away from the workspace;
then the CLI is run there: the Cambricon vendor is the only vendor plugin besides the core's
mock, and on this machine, which has no Cambricon driver, it is inactive with the paths tried.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _run(*args: str | Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not on PATH; the workspace is built with uv (see README)")
    root = tmp_path_factory.mktemp("cambricon-wheel")
    wheels = root / "wheels"
    for project in ("core", "plugins/cambricon"):
        _run(uv, "build", "--wheel", "--quiet", "--out-dir", wheels, ROOT / project)
    env_dir = root / "venv"
    _run(uv, "venv", "--quiet", "--python", sys.executable, env_dir)
    _run(
        uv,
        "pip",
        "install",
        "--quiet",
        "--python",
        env_dir / "bin" / "python",
        *sorted(wheels.glob("*.whl")),
    )
    return env_dir


def _cli(venv: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPUSHARE_", "FAKE_"))}
    env.pop("VIRTUAL_ENV", None)
    env["NEUWARE_HOME"] = "/nonexistent/neuware"
    return _run(venv / "bin" / "python", "-m", "xpushare.cli", *args, env=env)


def test_the_wheel_installs_alone_and_loads_the_cambricon_vendor(venv: Path) -> None:
    uv = shutil.which("uv") or "uv"
    listed = _run(uv, "pip", "list", "--python", venv / "bin" / "python", "--format", "json")
    names = {p["name"] for p in json.loads(listed)}
    # A working vendor and nothing else: no other vendor distribution came along.
    assert {n for n in names if n.startswith("xpushare")} == {"xpushare", "xpushare-cambricon"}
    records = {r["name"]: r for r in json.loads(_cli(venv, "plugins", "--json"))}
    vendors = {n for n, r in records.items() if r["kind"] == "vendor"}
    assert vendors == {"cambricon", "mock"}
    cambricon = records["cambricon"]
    assert cambricon["state"] == "loaded"
    assert cambricon["distribution"] == "xpushare-cambricon"
    assert "xpushare_detect" in cambricon["hooks"] and "xpushare_allocate" in cambricon["hooks"]
    assert cambricon["resources"][0] == "cambricon.com/vmlu"


def test_detect_without_the_library_says_why_the_vendor_is_inactive(venv: Path) -> None:
    payload = json.loads(_cli(venv, "detect", "--json"))
    states = {v["vendor"]: v for v in payload["vendors"]}
    cambricon = states["cambricon"]
    assert cambricon["state"] == "inactive"
    reason = cambricon["reason"]
    assert "libcndev.so" in reason and "not found" in reason
    assert "/nonexistent/neuware/lib64/libcndev.so" in reason
    assert "Install the Cambricon driver" in reason
    assert not [d for d in payload["devices"] if d["vendor"] == "cambricon"]

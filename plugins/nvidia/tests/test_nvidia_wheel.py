"""``xpushare-nvidia`` installs as a wheel on its own beside the core, and works there.

The wheels are built with ``uv build`` and installed into a fresh virtual environment away
from the workspace; then the CLI runs there. This machine has no NVIDIA driver, so the vendor
must load and then say it is inactive, naming the library paths it tried.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xpushare.testing.wheels import FreshEnv, WheelCache, clean_environ, install_in_fresh_venv

pytest_plugins = ["xpushare.testing.fixtures"]

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(wheel_cache: WheelCache, tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    root = tmp_path_factory.mktemp("nvidia-wheel")
    return install_in_fresh_venv(root, ROOT / "core", ROOT / "plugins/nvidia", wheels=wheel_cache)


def test_the_wheel_installs_alone_with_nvidia_ml_py_not_pynvml(venv: FreshEnv) -> None:
    names = venv.distributions()
    assert {n for n in names if n.startswith("xpushare")} == {"xpushare", "xpushare-nvidia"}
    assert "nvidia-ml-py" in names
    # The deprecated 'pynvml' distribution warns on import; it must never come along.
    assert "pynvml" not in names
    records = {r["name"]: r for r in json.loads(venv.run_cli("plugins", "--json"))}
    nvidia = records["nvidia"]
    assert nvidia["state"] == "loaded" and nvidia["distribution"] == "xpushare-nvidia"
    assert nvidia["resources"][0] == "nvidia.com/gpu"


def test_detect_without_the_driver_says_why_the_vendor_is_inactive(venv: FreshEnv) -> None:
    out = venv.run_cli("detect", "--json", env=clean_environ())
    states = {v["vendor"]: v for v in json.loads(out)["vendors"]}
    nvidia = states["nvidia"]
    assert nvidia["state"] == "inactive"
    assert "libnvidia-ml.so.1" in nvidia["reason"]

"""``xpushare-amd`` installs as a wheel on its own beside the core and works from the CLI.

The core and the plugin are built into wheels and installed into a fresh virtual
environment (from uv's cache, offline), as ``pip install xpushare-amd`` would: the vendor is
found through its entry point, no other vendor comes with it, ``xpushare detect`` explains
why it is inactive on a machine without ROCm, and lists the GPUs of a fake ROCm install.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from amd_fakes import build_library, mi300x

from xpushare.testing.wheels import FreshEnv, WheelCache, clean_environ, install_in_fresh_venv

# Builds two wheels and a virtual environment: about 15 s on two cores.
pytestmark = pytest.mark.slow
pytest_plugins = ["xpushare.testing.fixtures"]

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def venv(wheel_cache: WheelCache, tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    root = tmp_path_factory.mktemp("amd-dist")
    return install_in_fresh_venv(root, ROOT / "core", ROOT / "plugins/amd", wheels=wheel_cache)


def _clean_env(**extra: str) -> dict[str, str]:
    return clean_environ("ROCM_", "AMD_SMI_", **extra)


def test_the_wheel_brings_the_amd_vendor_and_nothing_else(venv: FreshEnv) -> None:
    names = venv.distributions()
    assert {"xpushare", "xpushare-amd", "amdsmi"} <= names
    assert not {n for n in names if n.startswith("xpushare-") and n != "xpushare-amd"}
    plugins = venv.run("xpushare", "plugins", "--json", env=_clean_env())
    assert plugins.returncode == 0, plugins.stderr
    amd = next(r for r in json.loads(plugins.stdout) if r["name"] == "amd")
    assert amd["state"] == "loaded" and amd["distribution"] == "xpushare-amd"
    assert amd["resources"] == [
        "amd.com/gpu",
        "amd.com/gpumem",
        "amd.com/gpumem-percentage",
        "amd.com/gpucores",
    ]


def test_detect_without_rocm_says_why_the_vendor_is_inactive(venv: FreshEnv) -> None:
    detect = venv.run("xpushare", "detect", "--verbose", env=_clean_env(XPUSHARE_PLUGINS="amd"))
    assert detect.returncode == 0, detect.stderr
    assert (
        "amd: inactive: libamd_smi.so (ROCm's AMD SMI library) could not be loaded" in detect.stdout
    )
    assert "/opt/rocm/lib/libamd_smi.so" in detect.stdout
    assert "Install ROCm's amd-smi-lib" in detect.stdout


def test_detect_lists_the_gpus_of_a_rocm_install(venv: FreshEnv, tmp_path: Path) -> None:
    build_library(tmp_path / "rocm" / "lib", [mi300x(0), mi300x(1)])
    env = _clean_env(XPUSHARE_PLUGINS="amd", ROCM_PATH=str(tmp_path / "rocm"))
    detect = venv.run("xpushare", "detect", "--json", env=env)
    assert detect.returncode == 0, detect.stderr
    payload = json.loads(detect.stdout)
    assert payload["vendors"] == [{"vendor": "amd", "state": "active", "devices": 2}]
    assert [d["id"] for d in payload["devices"]] == ["GPU-4d3a0f9e12ab5500", "GPU-4d3a0f9e12ab5501"]

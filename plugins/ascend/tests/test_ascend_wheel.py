"""``xpushare-ascend`` installs as a wheel on its own beside the core, and works there.

The two wheels are built with ``uv build`` and installed with ``uv pip`` into a fresh virtual
environment (dependencies from the package index or uv's cache), away from the workspace;
then the CLI is run there: the Ascend vendor is the only vendor plugin besides the core's
mock, and on this machine, which has no Ascend driver, it is inactive with the paths tried.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xpushare.testing.wheels import FreshEnv, WheelCache, clean_environ, install_in_fresh_venv

pytest_plugins = ["xpushare.testing.fixtures"]

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def venv(wheel_cache: WheelCache, tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    root = tmp_path_factory.mktemp("ascend-wheel")
    return install_in_fresh_venv(root, ROOT / "core", ROOT / "plugins/ascend", wheels=wheel_cache)


def _cli(venv: FreshEnv, *args: str) -> str:
    return venv.run_cli(*args, env=clean_environ(CANN_HOME="/nonexistent/Ascend"))


def test_the_wheel_installs_alone_and_loads_the_ascend_vendor(venv: FreshEnv) -> None:
    names = venv.distributions()
    # A working vendor and nothing else: no other vendor distribution came along.
    assert {n for n in names if n.startswith("xpushare")} == {"xpushare", "xpushare-ascend"}
    records = {r["name"]: r for r in json.loads(_cli(venv, "plugins", "--json"))}
    vendors = {n for n, r in records.items() if r["kind"] == "vendor"}
    assert vendors == {"ascend", "mock"}
    ascend = records["ascend"]
    assert ascend["state"] == "loaded"
    assert ascend["distribution"] == "xpushare-ascend"
    assert "xpushare_detect" in ascend["hooks"] and "xpushare_allocate" in ascend["hooks"]
    assert ascend["resources"][0] == "huawei.com/Ascend910B3"


def test_detect_without_the_library_says_why_the_vendor_is_inactive(venv: FreshEnv) -> None:
    payload = json.loads(_cli(venv, "detect", "--json"))
    states = {v["vendor"]: v for v in payload["vendors"]}
    ascend = states["ascend"]
    assert ascend["state"] == "inactive"
    reason = ascend["reason"]
    assert "libdcmi.so" in reason and "not found" in reason
    assert "/nonexistent/Ascend/driver/lib64/driver/libdcmi.so" in reason
    assert "Install the Ascend driver" in reason
    assert not [d for d in payload["devices"] if d["vendor"] == "ascend"]

"""``xpushare-others`` installs as a wheel on its own beside the core and works from the CLI.

The core and this distribution are built into wheels and installed into a fresh virtual
environment (from uv's cache where possible), as ``pip install "xpushare[others]"`` would: all
its vendors are found through their entry points, and on a machine without their libraries
``xpushare detect`` says, per vendor, that it is inactive and which paths it tried.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xpushare.testing.wheels import FreshEnv, WheelCache, clean_environ, install_in_fresh_venv

# Builds two wheels and a virtual environment: about 15 s on two cores.
pytestmark = pytest.mark.slow
pytest_plugins = ["xpushare.testing.fixtures"]

ROOT = Path(__file__).resolve().parents[3]
VENDORS = (
    "awsneuron",
    "biren",
    "enflame",
    "enflame-drs",
    "hygon",
    "iluvatar",
    "kunlun",
    "kunlun-vxpu",
    "metax",
    "mthreads",
    "thead",
    "vastai",
)


@pytest.fixture(scope="module")
def venv(wheel_cache: WheelCache, tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    root = tmp_path_factory.mktemp("others-dist")
    return install_in_fresh_venv(root, ROOT / "core", ROOT / "plugins/others", wheels=wheel_cache)


def test_the_wheel_brings_its_vendors(venv: FreshEnv) -> None:
    plugins = venv.run("xpushare", "plugins", "--json", env=clean_environ())
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


def test_detect_without_the_libraries_says_why_each_vendor_is_inactive(venv: FreshEnv) -> None:
    env = clean_environ(XPUSHARE_PLUGINS=",".join(VENDORS))
    detect = venv.run("xpushare", "detect", "--json", env=env)
    assert detect.returncode == 0, detect.stderr
    payload = json.loads(detect.stdout)
    states = {v["vendor"]: v for v in payload["vendors"]}
    assert {v: states[v]["state"] for v in VENDORS} == dict.fromkeys(VENDORS, "inactive")
    text = json.dumps(payload)
    for path in (
        "/sys/devices/virtual/neuron_device",
        "/usr/lib/libefml.so",
        "/opt/hyhal/lib/librocm_smi64.so",
        "/usr/local/corex/lib64/libixml.so",
        "/usr/local/xpu/lib64/libxpuml.so",
        "/opt/maca/lib/libmxsml.so",
        "libmtml.so.2",
        "/usr/lib/libvaml.so",
        "/usr/local/birensupa/driver/biren-smi/lib/libbiren-ml.so",
        "/usr/local/PPU_SDK/lib64/libhgml.so",
    ):
        assert path in text, path

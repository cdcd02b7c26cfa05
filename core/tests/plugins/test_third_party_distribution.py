"""A vendor wheel built and installed like a third party's is found, listed and used.

The wheels are built with ``uv build`` from throwaway projects and unpacked into a private
site directory that only the subprocess under test sees on its path, so the shared
environment never changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ACME = """
from xpushare import API_VERSION, hookimpl
from xpushare.models import Device, ResourceNames, VendorSpec

@hookimpl
def xpushare_vendor():
    return VendorSpec(name="acme", api_version=API_VERSION,
                      resource_names=ResourceNames(count="acme.example.com/npu"))

@hookimpl
def xpushare_startup(ctx):
    ctx.state["ok"] = True

@hookimpl
def xpushare_detect(ctx):
    return [Device(vendor="acme", id="ACME-0", index=0, model="Acme N1", memory_mib=4096)]
"""

BROKEN = """
raise ImportError("libbroken.so.1: cannot open shared object file")
"""


def _project(root: Path, dist: str, module: str, vendor: str, source: str) -> Path:
    project = root / dist
    (project / "src" / module).mkdir(parents=True)
    (project / "src" / module / "__init__.py").write_text(textwrap.dedent(source))
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [project]
            name = "{dist}"
            version = "1.2.3"
            dependencies = ["xpushare"]

            [project.entry-points."xpushare.vendors"]
            {vendor} = "{module}"

            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [tool.hatch.build.targets.wheel]
            packages = ["src/{module}"]
            """
        )
    )
    return project


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dists")
    site = root / "site"
    site.mkdir()
    for dist, module, vendor, source in (
        ("xpushare-acme", "xpushare_acme", "acme", ACME),
        ("xpushare-broken", "xpushare_broken", "broken", BROKEN),
    ):
        project = _project(root, dist, module, vendor, source)
        out = root / "wheels"
        subprocess.run(
            ["uv", "build", "--wheel", "--quiet", "--out-dir", str(out), str(project)],
            check=True,
            capture_output=True,
        )
    for wheel in (root / "wheels").glob("*.whl"):
        # A pure-Python wheel is installed by unpacking it into a site directory.
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
    return site


def _xpushare(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("XPUSHARE_")}
    environ.update(env, PYTHONPATH=str(site))
    return subprocess.run(
        [sys.executable, "-m", "xpushare.cli", *args],
        capture_output=True,
        text=True,
        env=environ,
        check=False,
    )


def test_installed_vendor_is_loaded_and_listed(site: Path) -> None:
    result = _xpushare(site, "plugins", "--json")
    assert result.returncode == 0, result.stderr
    records = {r["name"]: r for r in json.loads(result.stdout)}
    acme = records["acme"]
    assert acme["state"] == "loaded"
    assert acme["distribution"] == "xpushare-acme" and acme["version"] == "1.2.3"
    assert "xpushare_detect" in acme["hooks"]
    assert acme["resources"] == ["acme.example.com/npu"]


def test_broken_vendor_is_failed_and_the_others_still_work(site: Path) -> None:
    plugins = _xpushare(site, "plugins", "--json")
    records = {r["name"]: r for r in json.loads(plugins.stdout)}
    assert records["broken"]["state"] == "failed"
    assert "libbroken.so.1" in records["broken"]["error"]
    assert records["mock"]["state"] == "loaded"

    # The workspace's own vendor wheels may be installed too; look at these three only.
    detect = _xpushare(
        site,
        "detect",
        "--json",
        XPUSHARE_MOCK_DEVICES="2x T4-16GB",
        XPUSHARE_PLUGINS="acme,broken,mock",
    )
    assert detect.returncode == 0, detect.stderr
    payload = json.loads(detect.stdout)
    assert [d["id"] for d in payload["devices"]] == [
        "ACME-0",
        f"MOCK-{os.uname().nodename}-0",
        f"MOCK-{os.uname().nodename}-1",
    ]
    states = {v["vendor"]: v["state"] for v in payload["vendors"]}
    assert states == {"acme": "active", "mock": "active"}


def test_strict_mode_turns_the_broken_plugin_into_an_error(site: Path) -> None:
    result = _xpushare(site, "plugins", XPUSHARE_STRICT_PLUGINS="1")
    assert result.returncode != 0
    assert "broken" in result.stderr and "libbroken.so.1" in result.stderr


def test_allow_list_loads_only_the_named_plugins(site: Path) -> None:
    result = _xpushare(site, "plugins", "--json", XPUSHARE_PLUGINS="acme")
    states = {r["name"]: r["state"] for r in json.loads(result.stdout)}
    assert states["acme"] == "loaded"
    assert states["mock"] == "blocked" and states["broken"] == "blocked"

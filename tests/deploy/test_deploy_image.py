"""The image's build recipe agrees with the workspace (no Docker engine runs here).

The Dockerfile maps VENDORS to the core's extras and to plugin folders, and exports the lock's
pins with ``uv export``; these tests check those three agree and that the export command the
image runs works against this lock for every vendor set.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

import pytest
from chartkit import REPO

DOCKERFILE = REPO / "deploy" / "Dockerfile"


def dockerfile_vendors() -> set[str]:
    text = DOCKERFILE.read_text()
    (choices,) = re.findall(r"^\s+([a-z|]+)\) ;; \\$", text, re.M)
    return set(choices.split("|"))


def test_every_vendor_extra_can_be_built_into_the_image():
    optional = tomllib.loads((REPO / "core" / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    # A vendor extra names a vendor wheel (xpushare-<vendor>); other extras (plot) are not
    # vendors and have no place in the image's choice.
    extras = {
        name
        for name, requirements in optional.items()
        if any(r.startswith("xpushare-") for r in requirements)
    }
    assert extras and "plot" not in extras
    assert dockerfile_vendors() == set(extras)
    for extra in extras:
        assert (REPO / "plugins" / extra / "pyproject.toml").is_file(), extra
    all_line = re.search(r'list="([a-z ]+)"', DOCKERFILE.read_text())
    assert all_line is not None and set(all_line.group(1).split()) == set(extras)


def test_the_dockerignore_keeps_what_the_build_copies():
    ignore = (REPO / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    kept = {line[1:] for line in ignore if line.startswith("!")}
    assert {"pyproject.toml", "uv.lock", "core/src/**", "plugins/*/src/**"} <= kept
    for copied in re.findall(r"^COPY (?!--)(\S+)", DOCKERFILE.read_text(), re.M):
        assert any(k == copied or k.startswith(copied + "/") for k in kept), copied


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv")
def test_the_lock_exports_pinned_hashed_requirements_for_a_vendor_set():
    export = ["uv", "export", "--frozen", "--no-dev", "--no-emit-workspace"]
    result = subprocess.run(
        [*export, "--package", "xpushare", "--extra", "nvidia", "--extra", "amd"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if re.match(r"^[a-z0-9]", line)]
    names = {line.split("==")[0] for line in lines}
    assert {"kubernetes", "grpcio", "nvidia-ml-py"} <= names
    assert all("==" in line for line in lines)
    assert "--hash=sha256:" in result.stdout
    # Workspace members come as wheels built from the tree, never from the index.
    assert not names & {"xpushare", "xpushare-nvidia", "xpushare-amd"}
    # Test tools stay out of the image.
    assert not names & {"pytest", "helm-python-sdk", "kubernetes-validate"}
